"""A workflow's call tree, as its promises' tags declare it: each promise carries resonate:origin (the workflow's
root) and resonate:parent (the promise whose function created it). `manage.py tree` and the console's workflow page
read trees here."""

from collections import defaultdict

ORIGIN, PARENT = "resonate:origin", "resonate:parent"


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
