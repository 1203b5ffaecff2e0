"""A DRF router for ids that may hold any character, '/' included: the id is the rest of the path."""

import functools

from rest_framework.routers import SimpleRouter

ANY_ID = r"(?s:.+)"  # newlines too; NUL and over-long ids reach the protocol, which answers 400


class IdRouter(SimpleRouter):
    """Routes `{prefix}`, `{prefix}/{id}` and `{prefix}/{id}/{action}`, without trailing slashes.

    With any id possible, `promises/a/settle` is both the settle route of `a` and the detail route of
    `a/settle`; the method tells them apart (actions are POST, detail routes GET or DELETE). Django
    resolves by path alone, so action routes come first and pass the methods they do not serve, when
    the detail route serves them, to the detail route with the whole id.
    """

    def __init__(self):
        super().__init__(trailing_slash=False)

    def get_routes(self, viewset):
        return sorted(super().get_routes(viewset), key=lambda route: route.name == "{basename}-detail")

    def get_urls(self):
        urls = super().get_urls()
        details = {url.callback.cls: url.callback for url in urls if url.name.endswith("-detail")}
        for url in urls:
            view = url.callback
            if view.initkwargs["detail"] and view is not details.get(view.cls):
                url.callback = or_detail(view, details[view.cls])
        return urls


def or_detail(action_view, detail_view):
    """The action's view; a method only the detail route serves goes there, with the id `{id}/{url_path}`."""
    lookup = getattr(detail_view.cls, "lookup_url_kwarg", None) or detail_view.cls.lookup_field
    (name,) = set(action_view.actions.values())
    suffix = getattr(action_view.cls, name).url_path

    @functools.wraps(action_view)
    def view(request, **kwargs):
        method = "get" if request.method == "HEAD" else request.method.lower()
        if method not in action_view.actions and method in detail_view.actions:
            return detail_view(request, **{**kwargs, lookup: f"{kwargs[lookup]}/{suffix}"})
        return action_view(request, **kwargs)

    return view
