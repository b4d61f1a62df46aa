"""Grading on Kubernetes (docs/ray-kubernetes.md): deploy/raycluster.yaml is a RayCluster that
KubeRay v1.7.0's schema accepts, field by field as `kubectl apply`'s strict field validation
would (an unknown or misspelt field is an error), and that has what grading needs: resources on
the head and no grading there, /dev/shm in memory, Ray Client's port, the sandbox's security
context, the image of deploy/Dockerfile with `ray` on PATH. No Docker engine and no Kubernetes
cluster run here: the image is not built and the spec is not applied by these tests.
"""
import copy
import json
import os
import re

import jsonschema
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "deploy", "raycluster.yaml")
SCHEMA = os.path.join(ROOT, "deploy", "kuberay-raycluster-v1.7.0.schema.json")
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")


def _strict(schema):
    """The schema as the API server applies it with strict field validation: an object with
    declared properties accepts no other field (unless it preserves unknown fields)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _errors(spec) -> list[str]:
    schema = _strict(json.load(open(SCHEMA)))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(spec)]


@pytest.fixture(scope="module")
def spec():
    return yaml.safe_load(open(SPEC))


def test_the_spec_is_a_raycluster_that_kuberays_schema_accepts(spec):
    assert (spec["apiVersion"], spec["kind"]) == ("ray.io/v1", "RayCluster")
    assert _errors(spec) == []


@pytest.mark.parametrize("break_it, says", [
    (lambda s: s["spec"]["headGroupSpec"].update(rayStartParam={}), "rayStartParam"),
    (lambda s: s["spec"]["workerGroupSpecs"][0].update(replicas="4"), "'4' is not of type"),
    (lambda s: s["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
     ["limits"].update(cpu="two"), "does not match"),
    (lambda s: s["spec"]["workerGroupSpecs"][0].pop("groupName"), "'groupName' is a required"),
    (lambda s: s["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
     ["securityContext"].update(seccompProfile={}), "'type' is a required"),
])
def test_the_vendored_schema_refuses_what_kuberay_refuses(spec, break_it, says):
    broken = copy.deepcopy(spec)
    break_it(broken)
    assert any(says in e for e in _errors(broken)), _errors(broken)


def _containers(spec):
    groups = [spec["spec"]["headGroupSpec"]] + spec["spec"]["workerGroupSpecs"]
    return [(group, group["template"]["spec"], c) for group in groups
            for c in group["template"]["spec"]["containers"]]


def test_the_head_has_resources_and_grades_nothing_and_serves_ray_client(spec):
    head = spec["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"   # Ray schedules no grading task there
    container = head["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
    from grader.cohort import ray_address

    assert ports["client"] == ray_address.RAY_CLIENT_PORT


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", quantity).groups()
    return int(number) * {None: 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30}[unit]


def test_every_pod_has_shared_memory_the_sandbox_and_one_image(spec):
    images = set()
    for group, pod, container in _containers(spec):
        images.add(container["image"])
        shm = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        volume = next(v for v in pod["volumes"] if v["name"] == shm[0])
        assert volume["emptyDir"]["medium"] == "Memory"
        # Ray's object store fits in it (else Ray moves the store to /tmp).
        store = int(group["rayStartParams"]["object-store-memory"])
        assert store <= 0.95 * _bytes(volume["emptyDir"]["sizeLimit"]), (store, volume)
        security = container["securityContext"]
        assert security["runAsNonRoot"] and security["runAsUser"] != 0
        assert security["seccompProfile"]["type"] == security["appArmorProfile"]["type"] == \
            "Unconfined"
        resources = container["resources"]
        assert resources["requests"] == resources["limits"]   # Guaranteed: whole cores, pinned
        assert re.fullmatch(r"\d+", resources["limits"]["cpu"])
    assert len(images) == 1
    user = re.findall(r"^USER (\d+)$", open(DOCKERFILE).read(), re.M)
    assert user and {int(u) for u in user} == {security["runAsUser"]}


def test_the_spec_and_the_image_run_the_ray_release_the_course_pins(spec):
    pins = re.findall(r'"ray\[[\w,]+\]==([\d.]+)"', open(os.path.join(ROOT, "pyproject.toml")).read())
    assert len(pins) == 2 and set(pins) == {spec["spec"]["rayVersion"]}
    import ray

    assert ray.__version__ == spec["spec"]["rayVersion"]


def test_the_image_recipe_installs_the_environment_the_sandbox_and_ray_on_path():
    """KubeRay runs `ulimit -n 65536; ray start ...` through bash: `ray` must be on PATH (also
    for a login shell, which resets PATH); the environment is `make setup`'s, with the dashboard
    agent KubeRay's health checks call (the `cluster` extra)."""
    recipe = open(DOCKERFILE).read()
    assert re.search(r"apt-get install .*\bbubblewrap\b", recipe)
    assert re.search(r"apt-get install .*\bg\+\+", recipe)       # Inductor's CPU kernels
    assert "make setup" in recipe and "SETUP_EXTRAS=course,cluster" in recipe
    assert "ln -s /course/.venv/bin/ray /usr/local/bin/ray" in recipe
    assert "ENV PATH=/course/.venv/bin:" in recipe
    ignored = open(os.path.join(ROOT, ".dockerignore")).read().split()
    for private in ("submitted", "downloads", "gradebook.db", ".venv", "canvas-roster.csv"):
        assert private in ignored, private
