"""manage.py tree: the call tree of a workflow, from the resonate:origin and resonate:parent tags of its promises."""

from floor.lineage import ORIGIN, children_by_parent, walk
from resonate_site.management.cli import ResonateCommand, call

PAGE = 1000  # the largest search page


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
