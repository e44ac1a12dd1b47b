#!/usr/bin/env python3
"""Validates recorded server responses against the response schemas of the upstream OpenAPI 3.1
document. Input: a JSON-lines file of {"method", "path" (template, e.g. /items/{id}), "status",
"body"}. Prints one line per failure and exits 1 if any response does not validate or its
operation or status is not in the document."""
import json
import os
import sys
from urllib.parse import quote

from jsonschema import Draft202012Validator

spec = json.load(open(sys.argv[1]))

# Where wire.md decides against the upstream document, the document is amended (openapi_amend.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openapi_amend import amended  # noqa: E402
spec = amended(spec)
try:  # jsonschema >= 4.18
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    registry = Registry().with_resource("urn:spec", Resource.from_contents(spec, default_specification=DRAFT202012))

    def validator_for(ref):
        return Draft202012Validator({"$ref": ref}, registry=registry)
except ImportError:  # Debian 12's python3-jsonschema 4.10
    from jsonschema import RefResolver

    def validator_for(ref):
        return Draft202012Validator({"$ref": ref}, resolver=RefResolver(base_uri="urn:spec", referrer=spec, store={"urn:spec": spec}))


def pointer(*parts):
    return "/".join(quote(p.replace("~", "~0").replace("/", "~1"), safe="") for p in parts)


failures = checked = 0
for line in open(sys.argv[2]):
    rec = json.loads(line)
    method, path, status = rec["method"].lower(), rec["path"], str(rec["status"])
    op = spec["paths"].get(path, {}).get(method)
    if op is None:
        print(f"{method.upper()} {path}: not an operation of the document"); failures += 1; continue
    key = status if status in op["responses"] else "default" if "default" in op["responses"] else None
    if key is None:
        print(f"{method.upper()} {path}: status {status} is not documented"); failures += 1; continue
    resp = op["responses"][key]
    if "application/json" not in resp.get("content", {}):
        checked += 1; continue
    ref = "urn:spec#/" + pointer("paths", path, method, "responses", key, "content", "application/json", "schema")
    validator = validator_for(ref)
    errors = list(validator.iter_errors(json.loads(rec["body"])))
    for e in errors[:3]:
        print(f"{method.upper()} {path} {status}: /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}")
    failures += bool(errors)
    checked += 1
print(f"{checked} responses checked against the OpenAPI document, {failures} failed")
sys.exit(1 if failures else 0)
