"""manage.py tree: the call tree of a workflow, from the resonate:origin and resonate:parent tags of its promises."""

from collections import defaultdict

from resonate_site.management.cli import ResonateCommand, call

ORIGIN, PARENT = "resonate:origin", "resonate:parent"
PAGE = 1000  # the largest search page


def parents(records, root_id):
    """Each promise's parent in the tree: its resonate:parent when that promise is in the tree, else the root.

    A loop of parent tags (which no SDK writes) is cut at the root, so every promise is printed once.
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


def tree_lines(root, children):
    lines, more_below = [], []  # more_below[d]: whether depth d + 1 still has siblings to come
    for depth, record, last in walk(root, children):
        del more_below[max(depth - 1, 0) :]
        prefix = "".join("│   " if more else "    " for more in more_below)
        branch = ("└── " if last else "├── ") if depth else ""
        lines.append(f"{prefix}{branch}{record['id']}  {record['state']}")
        if depth:
            more_below.append(not last)
    return lines


def nested(root, children):
    """The tree as JSON, {id, state, children: [...]}, built without recursion (call trees can be deep)."""
    top = {"id": root["id"], "state": root["state"], "children": []}
    stack = [(root, top)]
    while stack:
        record, node = stack.pop()
        for kid in children[record["id"]]:
            node["children"].append({"id": kid["id"], "state": kid["state"], "children": []})
            stack.append((kid, node["children"][-1]))
    return top


class Command(ResonateCommand):
    help = "Print the call tree of a workflow: the promises tagged resonate:origin=ID, nested by resonate:parent."

    def add_arguments(self, parser):
        parser.add_argument("id", help="the root promise of the workflow")
        self.add_output_arguments(parser, progress=True)

    def handle(self, *args, id, json, **options):
        root = call("promise.get", {"id": id})["promise"]
        records = {id: root}
        with self.progress(options, desc="tree", unit=" promises") as bar:
            for record in self.descendants(id):
                records[record["id"]] = record
                bar.update()
        children = children_by_parent(records, id)
        if json:
            self.write_json(nested(root, children))
        else:
            self.write_lines(tree_lines(root, children))

    def descendants(self, origin):
        request = {"tags": {ORIGIN: origin}, "limit": PAGE}
        while True:
            page = call("promise.search", request)
            yield from page["promises"]
            if "cursor" not in page:
                return
            request["cursor"] = page["cursor"]
