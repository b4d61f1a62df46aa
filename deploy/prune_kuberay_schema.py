"""Vendor the part of KubeRay's RayCluster schema that deploy/raycluster.yaml uses, for
tests/test_kubernetes.py (no network there, and the whole CRD is 930 kB).

    python deploy/prune_kuberay_schema.py CRD.yaml deploy/raycluster.yaml OUT.json SOURCE

CRD.yaml is ``helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml`` of a KubeRay release
(SOURCE says which: repository, path, tag, commit). Along every path the spec uses, each object
keeps all its property names (a name the spec misspells is still found unknown) and every
constraint (types, required, enums, patterns); a property the spec does not use keeps its name
with an empty schema. Re-run it when the spec uses a new field.
"""
import json
import sys

import yaml


def prune(schema: dict, values: list) -> dict:
    """``schema`` cut down to what ``values`` (every instance at this path) use."""
    out = {k: v for k, v in schema.items() if k not in ("properties", "items", "description")}
    if "properties" in schema:
        out["properties"] = {}
        for name, sub in schema["properties"].items():
            used = [v[name] for v in values if isinstance(v, dict) and name in v]
            out["properties"][name] = prune(sub, used) if used else {}
    if "items" in schema:
        out["items"] = prune(schema["items"], [x for v in values if isinstance(v, list) for x in v])
    return out


def main(crd_path: str, spec_path: str, out_path: str, source: str) -> None:
    crd = yaml.safe_load(open(crd_path))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    spec = yaml.safe_load(open(spec_path))
    pruned = prune(version["schema"]["openAPIV3Schema"], [spec])
    pruned = {"$comment": f"KubeRay's RayCluster v1 openAPIV3Schema ({source}), pruned to what "
                          f"{spec_path} uses by deploy/prune_kuberay_schema.py: unused properties "
                          f"keep their names with an empty schema. KubeRay is Apache-2.0.",
              **pruned}
    with open(out_path, "w") as fh:
        json.dump(pruned, fh, indent=1, sort_keys=True)
        fh.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
