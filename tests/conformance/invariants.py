"""Invariants of the stored state, checked on the server's own debug.snap."""

from collections import Counter


def violations(snap, versions):
    """What is wrong with a snapshot; `versions` remembers each task's highest version across calls."""
    problems = []
    promises = {p["id"]: p for p in snap["promises"]}
    tasks = {t["id"]: t for t in snap["tasks"]}
    for task_id, count in Counter(t["id"] for t in snap["taskTimeouts"]).items():
        if count > 1:
            problems.append(f"task {task_id} has {count} timeouts")
    for callback in snap["callbacks"]:
        if promises[callback["awaited"]]["state"] != "pending":
            problems.append(f"callback on settled promise {callback['awaited']}")
    for promise in promises.values():
        if "resonate:target" in promise["tags"] and promise["id"] not in tasks:
            problems.append(f"targeted promise {promise['id']} has no task")
    for task in tasks.values():
        if task["version"] < versions.get(task["id"], 0):
            problems.append(f"task {task['id']} version went from {versions[task['id']]} to {task['version']}")
        versions[task["id"]] = task["version"]
    return problems
