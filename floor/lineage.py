"""What the SDKs record of a workflow: its call tree, in its promises' tags (resonate:origin, the workflow's root;
resonate:parent, the promise whose function created this one), and the function each promise runs, in its param.
`manage.py tree` and the console read them here.

The function is "func" in the JSON that param.data holds, base64-encoded, as both released SDKs write it. SQL
queries read it with resonate_function(param): a PL/pgSQL function on PostgreSQL (promises/migrations/0006), a
Python one registered on each SQLite connection (floor/sqlite3/base.py); both give NULL where param holds none.
"""

import base64
import binascii
import contextlib
import json
from collections import defaultdict

ORIGIN, PARENT = "resonate:origin", "resonate:parent"
FUNCTION_SQL = "resonate_function"


NOT_JSON = object()  # what sdk_data gives for data that is not base64 JSON


def sdk_data(value):
    """The JSON that a protocol value's data holds base64-encoded, as both SDKs write a param or a result; NOT_JSON
    when the value holds no such data."""
    data = value.get("data") if isinstance(value, dict) else None
    if isinstance(data, str):
        with contextlib.suppress(binascii.Error, ValueError):
            return json.loads(base64.b64decode(data, validate=True))
    return NOT_JSON


def function_name(param):
    """The function a promise runs, or None: "func" in the JSON that param.data encodes (base64)."""
    value = sdk_data(param)
    if isinstance(value, dict) and isinstance(value.get("func"), str):
        return value["func"]
    return None


def function_of_json(param):
    """function_name of a param stored as JSON text (SQLite's resonate_function)."""
    with contextlib.suppress(TypeError, ValueError):
        return function_name(json.loads(param))
    return None


def parents(records, root_id):
    """Each promise's parent in the tree: its resonate:parent when that promise is in the tree, else the root.

    A loop of parent tags (which no SDK writes) is cut at the root, so every promise appears once.
    """
    parent = {}
    for id, record in records.items():
        tag = record["tags"].get(PARENT)
        if id != root_id:
            parent[id] = tag if tag in records and tag != id else root_id
    rooted = {root_id}
    for id in parent:
        path, node = set(), id
        while node not in rooted:
            if node in path:
                parent[node] = root_id
                break
            path.add(node)
            node = parent[node]
        rooted |= path
    return parent


def children_by_parent(records, root_id):
    """{id: [child records, in creation order]}."""
    children = defaultdict(list)
    parent = parents(records, root_id)
    for record in sorted(records.values(), key=lambda r: (r["createdAt"], r["id"])):
        if record["id"] != root_id:
            children[parent[record["id"]]].append(record)
    return children


def walk(root, children):
    """(depth, record, whether it is the last of its siblings), depth first."""
    stack = [(0, root, True)]
    while stack:
        depth, record, last = stack.pop()
        yield depth, record, last
        kids = children[record["id"]]
        stack.extend((depth + 1, kid, n == 0) for n, kid in enumerate(reversed(kids)))
