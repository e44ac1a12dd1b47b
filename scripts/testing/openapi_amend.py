"""The upstream OpenAPI document as `marfafs serve` implements it: the one place where the
server's deliberate deviations from upstream's document are applied (ARCHITECTURE.md, "The server
and upstream's document"). Used by openapi_check.py (recorded responses) and openapi_fuzz.py
(generated requests)."""
import copy

# The operations the reference server implements (the rest of upstream's document is out of its
# scope: search, webhooks, integrations, spaces, profiles, bulk jobs...).
IMPLEMENTED = {
    "/items": ["get", "post"], "/items/{id}": ["get", "patch", "delete"],
    "/items/{id}/restore": ["post"], "/items/{id}/transition": ["post"], "/items/{id}/versions": ["get"],
    "/items/{id}/metadata": ["put", "patch"], "/items/{id}/tags": ["post"], "/items/{id}/tags/{tag}": ["delete"],
    "/items/{id}/edges": ["get"], "/items/{id}/backrefs": ["get"],
    "/edges": ["get", "post"], "/edges/{id}": ["delete"],
    "/types": ["get", "post"], "/types/{id}": ["get"],
    "/metadata/tags": ["get"], "/blobs": ["post"], "/blobs/{hash}": ["get"],
    "/keys": ["get", "post"], "/keys/{id}": ["delete"],
}


def amended(spec):
    spec = copy.deepcopy(spec)
    # W-6: the last page of a list has `"cursor": null` (the edge lists say so with OpenAPI 3.0's
    # `nullable`, which a JSON Schema 2020-12 validator does not read).
    for path in ["/items", "/edges", "/items/{id}/edges", "/items/{id}/backrefs"]:
        schema = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        for variant in schema.get("anyOf", [schema]):
            variant["properties"]["cursor"] = {"type": ["string", "null"]}
    # wire.md's error codes that upstream's per-status enums lack (W-3, W-7): a missing field and
    # a field of the wrong type are told apart from other validation errors, and a 409 may say the
    # base version's ancestor is gone.
    extra = ["missing_required_field", "type_mismatch", "ancestor_unavailable"]

    def walk(node):
        if isinstance(node, dict):
            code = node.get("properties", {}).get("error", {}).get("properties", {}).get("code")
            if isinstance(code, dict) and isinstance(code.get("enum"), list):
                code["enum"] += [c for c in extra if c not in code["enum"]]
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return spec


def implemented_only(spec):
    """The document with only the implemented operations, each answering the statuses the server
    gives for a request it refuses: 400 (a parameter or body it does not take, W-3), 405 (a method a
    path does not take), 413 (a body past the limit)."""
    spec = amended(spec)
    keep = {}
    for path, ops in spec["paths"].items():
        if path not in IMPLEMENTED:
            continue
        kept = {m: op for m, op in ops.items() if m in IMPLEMENTED[path] or m == "parameters"}
        keep[path] = kept
    spec["paths"] = keep
    return spec
