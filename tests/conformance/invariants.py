"""Invariants of the stored state, checked on the server's own debug.snap.

They are the single-state properties of the specification's catalogue (spec/02-abstract/properties.lean, its
later history) that hold at 83d64c3 with PROTOCOL.md's decisions and that a snapshot shows, each reported under
the catalogue's name, and a few of this server's own. `manage.py invariants` checks the same over every stored
row and lists the rest (what the schema enforces, what 83d64c3 breaks on purpose). A snapshot has no schedules,
shows a task's resumes as a count and lists only the messages still to be delivered, so the schedule properties
and `well_formed_task_resumes_unique` are left to the command.
"""

from collections import Counter

TARGET, TIMER = "resonate:target", "resonate:timer"
PENDING, ACQUIRED, RETRY, LEASE = "pending", "acquired", 0, 1


def violations(snap, versions, now=None):
    """What is wrong with a snapshot, one line each, starting with the property's name. `versions` remembers each
    task's highest version across calls; `now`, when given, is the time of the step that led to the snapshot (the
    clock-relative properties need it)."""
    promises = {p["id"]: p for p in snap["promises"]}
    tasks = {t["id"]: t for t in snap["tasks"]}
    timeouts = {}
    for timeout in snap["taskTimeouts"]:
        timeouts.setdefault(timeout["id"], []).append(timeout["type"])
    problems = [*store_violations(snap)]
    for promise in promises.values():
        problems += [f"{name}: promise {promise['id']}" for name in promise_violations(promise, now)]
        if TARGET in promise["tags"] and promise["id"] not in tasks:
            problems.append(f"consistent_task_iff_targeted_promise: promise {promise['id']} has no task")
    for task in tasks.values():
        found = task_violations(task, timeouts.get(task["id"], []), promises.get(task["id"]))
        problems += [f"{name}: task {task['id']} ({task['state']})" for name in found]
        if task["version"] < versions.get(task["id"], 0):
            problems.append(f"task {task['id']} version went from {versions[task['id']]} to {task['version']}")
        versions[task["id"]] = task["version"]
    for callback in snap["callbacks"]:
        if promises[callback["awaited"]]["state"] != PENDING:
            problems.append(f"callback on settled promise {callback['awaited']}")
    for listener in snap["listeners"]:
        if not address_valid(listener["address"]):
            problems.append(f"consistent_listener_addresses_deliverable: listener {listener['address']}")
    for entry in snap["messages"]:
        problems += [f"{name}: {describe(entry)}" for name in message_violations(entry, promises, tasks)]
    return problems


def store_violations(snap):
    """The catalogue's uniqueness properties (the schema enforces them on the server's tables)."""
    keyed = {
        "well_formed_store_promise_ids_unique": [p["id"] for p in snap["promises"]],
        "well_formed_store_task_ids_unique": [t["id"] for t in snap["tasks"]],
        "well_formed_store_outbox_keys_unique": [key(entry) for entry in snap["messages"]],
        "well_formed_promise_callbacks_unique": [(c["awaited"], c["awaiter"]) for c in snap["callbacks"]],
        "well_formed_promise_listeners_unique": [(li["id"], li["address"]) for li in snap["listeners"]],
    }
    for name, keys in keyed.items():
        for repeated, count in Counter(keys).items():
            if count > 1:
                yield f"{name}: {repeated} is there {count} times"
    for task_id, count in Counter(t["id"] for t in snap["taskTimeouts"]).items():
        if count > 1:
            yield f"task {task_id} has {count} timeouts"


def no_value(value):
    return value.get("data") is None and not value.get("headers")


def promise_violations(p, now):
    """The names of the catalogue's promise properties the record breaks."""
    settled_at, timeout_at, created_at = p.get("settledAt"), p["timeoutAt"], p["createdAt"]
    at_deadline = settled_at == timeout_at
    timer = p["tags"].get(TIMER) == "true"
    checks = {
        "well_formed_promise_created_at_lte_timeout_at": created_at <= timeout_at,
        "well_formed_promise_pending_created_before_deadline": p["state"] != PENDING or created_at < timeout_at,
        "well_formed_promise_settled_at_lte_timeout_at": settled_at is None or settled_at <= timeout_at,
        "well_formed_promise_created_at_lte_settled_at": settled_at is None or created_at <= settled_at,
        "well_formed_promise_settled_at_iff_not_pending": (p["state"] != PENDING) == (settled_at is not None),
        "well_formed_promise_pending_has_no_value": p["state"] != PENDING or no_value(p["value"]),
        "well_formed_promise_deadline_verdict_matches_timer_tag": not at_deadline
        or p["state"] == ("resolved" if timer else "rejected_timedout"),
        "well_formed_promise_deadline_settlement_has_no_value": not at_deadline or no_value(p["value"]),
        "well_formed_promise_timedout_is_server_owned": p["state"] != "rejected_timedout" or at_deadline,
    }
    if now is not None:
        checks["well_formed_promise_created_at_lte_now"] = created_at <= now
        checks["well_formed_promise_settled_at_lte_now"] = settled_at is None or settled_at <= now
    return [name for name, holds in checks.items() if not holds]


def task_violations(t, kinds, promise):
    """The names of the catalogue's task properties the record (with its timeouts' kinds and its promise) breaks."""
    state, leased = t["state"], "pid" in t or "ttl" in t or kinds
    checks = {
        "well_formed_task_acquired_iff_has_pid": (state == ACQUIRED) == ("pid" in t),
        "well_formed_task_acquired_iff_has_ttl": (state == ACQUIRED) == ("ttl" in t),
        "well_formed_task_acquired_iff_has_expires_at": (state == ACQUIRED) == (kinds == [LEASE]),
        "well_formed_task_pending_iff_has_retry_at": (state == PENDING) == (kinds == [RETRY]),
        "well_formed_task_fulfilled_is_cleared": state != "fulfilled" or not (leased or t["resumes"]),
        "well_formed_task_suspended_is_cleared": state != "suspended" or not leased,
        "well_formed_task_halted_is_cleared": state != "halted" or not leased,
        "well_formed_task_suspended_has_no_resumes": state != "suspended" or t["resumes"] == 0,
        "well_formed_task_acquired_version_positive": state != ACQUIRED or t["version"] >= 1,
        "it has its promise": promise is not None,
    }
    if promise is not None:
        checks["consistent_settled_task_promise_settled"] = state != "fulfilled" or promise["state"] != PENDING
        checks["consistent_settled_promise_has_fulfilled_task"] = promise["state"] == PENDING or state == "fulfilled"
    return [name for name, holds in checks.items() if not holds]


def message_violations(entry, promises, tasks):
    """The names of the catalogue's outbox properties a message breaks."""
    message, address = entry["message"], entry["address"]
    if message["kind"] == "execute":
        ref = message["data"]["task"]
        task, promise = tasks.get(ref["id"]), promises.get(ref["id"])
        checks = {
            "consistent_outbox_execute_names_existing_task": task is not None,
            "consistent_outbox_never_ahead": task is None or ref["version"] <= task["version"],
            "consistent_outbox_execute_address_is_target_tag": promise is None
            or address == promise["tags"].get(TARGET, ""),
        }
    else:
        record = message["data"]["promise"]
        promise = promises.get(record["id"])
        checks = {
            "consistent_outbox_unblock_names_settled_promise": record["state"] != PENDING
            and promise is not None
            and promise["state"] != PENDING,
            "consistent_outbox_unblock_address_deliverable": address_valid(address),
        }
    return [name for name, holds in checks.items() if not holds]


def address_valid(address):
    """The catalogue's addressValid (spec/01-protocol/validation.lean), written out here to stay an oracle."""
    return address.startswith(("http://", "https://")) or (address.startswith("poll://") and "@" in address)


def key(entry):
    message = entry["message"]
    if message["kind"] == "execute":
        return ("execute", message["data"]["task"]["id"])
    return ("unblock", message["data"]["promise"]["id"], entry["address"])


def describe(entry):
    message = entry["message"]
    subject = message["data"]["task"] if message["kind"] == "execute" else message["data"]["promise"]["id"]
    return f"{message['kind']} {subject} to {entry['address']!r}"
