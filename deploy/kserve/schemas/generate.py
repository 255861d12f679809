"""Writes kserve-<version>.schema.json: KServe's API types as one JSON Schema document.

Run by hand when KServe's version moves (tests/deploy validates against the file it writes):
    pip download --no-deps -d /tmp/kserve kserve==VERSION && cd /tmp/kserve && unzip kserve-*.whl
    python deploy/kserve/schemas/generate.py /tmp/kserve/kserve/models VERSION

The source is the kserve distribution's generated models (kserve/models/*.py: openapi-generator's
output for KServe's OpenAPI document, pkg/openapi/swagger.json, made from the same Go types
controller-gen turns into the CRDs): each model's fields (``attribute_map``), their types
(``openapi_types``) and the fields its setters refuse to leave unset (required). The files are
read, not imported (the SDK's dependencies are not needed). Kubernetes' own types
(V1Container, V1ObjectMeta, ...) become references into kubernetes-validate's strict
definitions ("https://kubernetes.io/api/_definitions.json#/$defs/io.k8s...."), resolved by
the test. Unknown fields are refused (additionalProperties: false): the API server would prune
them, kubectl --validate=strict refuses them.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

#: where a Kubernetes Python client name (V1Container) is looked for, in this order
K8S_GROUPS = ("io.k8s.api.core", "io.k8s.apimachinery.pkg.apis.meta", "io.k8s.api.autoscaling",
              "io.k8s.api.apps")
K8S = "https://kubernetes.io/api/_definitions.json#/$defs/"
K8S_DEFINITIONS: set[str] = set()
UNRESOLVED: set[str] = set()
ROOTS = ("V1alpha1ClusterServingRuntime", "V1alpha1ServingRuntime", "V1beta1InferenceService")


def read_models(models: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(models.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            fields: dict = {}
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    name = item.targets[0].id
                    if name in ("openapi_types", "attribute_map"):
                        fields[name] = ast.literal_eval(item.value)
            if "openapi_types" in fields:
                source = path.read_text()
                fields["required"] = sorted(set(re.findall(
                    r"Invalid value for `(\w+)`, must not be `None`", source)))
                found[node.name] = fields
    return found


def type_schema(kind: str, models: dict) -> dict:
    if kind.startswith("list["):
        return {"type": "array", "items": type_schema(kind[5:-1], models)}
    if kind.startswith("dict("):
        value = kind[5:-1].split(",", 1)[1].strip()
        return {"type": "object", "additionalProperties": type_schema(value, models)}
    simple = {"str": {"type": "string"}, "int": {"type": "integer"}, "bool": {"type": "boolean"},
              "float": {"type": "number"}, "datetime": {"type": "string"}, "object": {}}
    if kind in simple:
        return simple[kind]
    if kind in models:
        return {"$ref": f"#/$defs/{kind}"}
    if kind == "V1beta1MetricQuantity":  # named by the models, no model of its own: a quantity
        return {"type": ["string", "number"]}
    if kind == "ResourceQuantity":
        return {"$ref": K8S + "io.k8s.apimachinery.pkg.api.resource.Quantity"}
    if kind.startswith("Knative"):  # only in status, which the controller writes
        return {}
    if kind.startswith("K8sIo"):  # K8sIoApiAppsV1DeploymentStrategy
        words = re.findall(r"[A-Z][a-z0-9]*", kind)
        return {"$ref": K8S + ".".join(w.lower() for w in words[:-1]).replace("k8s.io", "io.k8s")
                + "." + words[-1]}
    if match := re.fullmatch(r"(V\d\w*?)([A-Z]\w*)", kind):  # V1Container: the client's name
        version, type_name = match.group(1).lower(), match.group(2)
        for prefix in K8S_GROUPS:
            full = f"{prefix}.{version}.{type_name}"
            if full in K8S_DEFINITIONS:
                return {"$ref": K8S + full}
    UNRESOLVED.add(kind)  # named by a model, yet no model of its own in this release
    return {"description": f"{kind}: not in the kserve models, not validated"}


def main(models_dir: str, version: str) -> None:
    import kubernetes_validate

    k8s = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    latest = sorted(k8s.glob("v*-local-strict"),
                    key=lambda p: [int(x) for x in p.name[1:].split("-")[0].split(".")])
    K8S_DEFINITIONS.update(json.loads((latest[-1] / "_definitions.json").read_text())
                           ["$defs"])
    models = read_models(Path(models_dir))
    definitions = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in definitions:
            continue
        model = models[name]
        properties = {}
        for field, kind in model["openapi_types"].items():
            schema = type_schema(kind, models)
            properties[model["attribute_map"][field]] = schema
            pending += re.findall(r"\"#/\$defs/(\w+)", json.dumps(schema))
        definitions[name] = {
            "type": "object", "properties": properties, "additionalProperties": False,
            "required": [model["attribute_map"][f] for f in model["required"]],
        }
    document = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                "$id": f"urn:naiad:kserve-{version}",
                "title": f"KServe {version} API types (from the kserve distribution's models)",
                "x-unresolved-types": sorted(UNRESOLVED), "$defs": definitions}
    out = Path(__file__).with_name(f"kserve-{version}.schema.json")
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(definitions)} types; not resolved: {sorted(UNRESOLVED)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
