"""deploy/kubernetes/: every manifest parses; the built-in kinds validate against the real Kubernetes JSON
schemas (kubernetes-validate, strict); the CRDs' schemas agree with rackscale's own loader on valid and
invalid cluster documents; and the manifests agree with each other and with the seed (72 GPUs, priority
1000000, the scheduler's RBAC, the monitoring ConfigMaps in sync with deploy/prometheus and deploy/grafana).

Nothing here talks to a Kubernetes API server: none can run in the test environment.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from rackscale.loaders import SpecError, load_cluster, parse_cluster_text

ROOT = Path(__file__).resolve().parents[2]
KDIR = ROOT / "deploy" / "kubernetes"
EXAMPLES = ROOT / "examples"

# The Kubernetes versions the manifests are validated against: the oldest supported and a recent one
# (both ship with kubernetes-validate >= 1.28's schema sets; pinned so a package upgrade changes nothing).
K8S_VERSIONS = ("1.30", "1.33")
CUSTOM_GROUPS = ("nvidia.com/", "rackscale.io/", "kustomize.config.k8s.io/")

GPU = "nvidia.com/gpu"
SEED_GPUS = 72
SEED_PRIORITY = 1_000_000
NODE_MEMORY_GIB = 1024  # rackscale's node model default (docs/specs.md): a pod must fit one node


# ------------------------------------------------------------------------------------------- helpers
def kubernetes_validate() -> ModuleType:
    try:
        import kubernetes_validate as kv
    except ImportError:
        pytest.fail(
            "kubernetes-validate is not installed: pip install 'kubernetes-validate>=1.28' "
            "(it is in the dev extra: pip install -e '.[dev]')",
            pytrace=False,
        )
    return kv


def manifest_files() -> list[Path]:
    return sorted(KDIR.glob("*.yaml"))


@cache
def docs_of(name: str) -> tuple[dict[str, Any], ...]:
    with (KDIR / name).open(encoding="utf-8") as f:
        return tuple(d for d in yaml.safe_load_all(f) if d is not None)


def all_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in manifest_files() for d in docs_of(p.name)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in all_docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def builtin(doc: dict[str, Any]) -> bool:
    return not str(doc["apiVersion"]).startswith(CUSTOM_GROUPS)


def to_json_schema(node: Any, *, root: bool = True) -> Any:
    """An openAPIV3Schema as a JSON Schema (2020-12) that behaves as the API server does on create with
    kubectl's default strict field validation: x-kubernetes-* keys dropped, OpenAPI 3.0's boolean
    exclusiveMinimum/Maximum turned into numbers, and unknown fields refused (additionalProperties: false
    where properties are listed and unknown fields are not preserved)."""
    if isinstance(node, list):
        return [to_json_schema(n, root=False) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v, root=False) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(limit)
        elif out.get(bound) is False:
            del out[bound]
    if "properties" in node and "type" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def crd(name: str) -> dict[str, Any]:
    return one("CustomResourceDefinition", name)


def crd_raw_schema(name: str) -> dict[str, Any]:
    (version,) = crd(name)["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def crd_validator(name: str) -> jsonschema.Draft202012Validator:
    schema = to_json_schema(crd_raw_schema(name))
    # metadata is the API server's, not the CRD's: keep it open.
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def rackscale_accepts(doc: dict[str, Any]) -> bool:
    try:
        parse_cluster_text(yaml.safe_dump(doc))
    except SpecError:
        return False
    return True


def seed(**spec_changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(docs_of("gpucluster-sample.yaml")[0])
    for key, value in spec_changes.items():
        if value is _DELETE:
            del doc["spec"][key]
        else:
            doc["spec"][key] = value
    return doc


_DELETE = object()


def rich(path: str, value: Any) -> dict[str, Any]:
    """examples/cluster-nvl72.yaml with spec.<path> (dotted) set to value (or deleted)."""
    doc = yaml.safe_load((EXAMPLES / "cluster-nvl72.yaml").read_text())
    *parents, last = path.split(".")
    node = doc["spec"]
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return doc


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def gib(quantity: str) -> float:
    units = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1, "Ti": 2**10}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    raise AssertionError(f"unexpected quantity {quantity!r}")


# ------------------------------------------------------------------------------------------- parsing
def test_there_are_manifests() -> None:
    names = {p.name for p in manifest_files()}
    for expected in (
        "crd-gpucluster.yaml",
        "gpucluster-sample.yaml",
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac.yaml",
        "scheduler-config.yaml",
        "scheduler-deployment.yaml",
        "service-deployment.yaml",
        "service.yaml",
        "priorityclass-high.yaml",
        "storageclass-high-speed.yaml",
        "training-job.yaml",
        "inference-deployment.yaml",
        "monitoring.yaml",
        "kustomization.yaml",
    ):
        assert expected in names


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_parses_with_kind_and_name(path: Path) -> None:
    docs = docs_of(path.name)
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        assert isinstance(doc, dict)
        assert doc.get("apiVersion") and doc.get("kind")
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"]
    # No YAML anchors/aliases: kubectl and kustomize handle them unevenly.
    tokens = yaml.scan(path.read_text(encoding="utf-8"))
    assert not any(isinstance(t, yaml.AnchorToken | yaml.AliasToken) for t in tokens)


# ------------------------------------------------------------------------------------------- kubernetes-validate
BUILTIN_DOCS = [(name, d) for name, d in all_docs() if builtin(d)]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("name", "doc"), BUILTIN_DOCS, ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in BUILTIN_DOCS]
)
def test_builtin_kind_validates_strict(name: str, doc: dict[str, Any], version: str) -> None:
    kv = kubernetes_validate()
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as err:
        path = ".".join(map(str, err.path))
        pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {path}: {err.message}")


def test_kubernetes_validate_catches_a_broken_manifest() -> None:
    """The check above is real: a typo'd field and a wrong type are refused (strict)."""
    kv = kubernetes_validate()
    job = copy.deepcopy(one("Job"))
    job["spec"]["completionz"] = 18
    with pytest.raises(kv.ValidationError):
        kv.validate(job, K8S_VERSIONS[0], strict=True)
    job = copy.deepcopy(one("Job"))
    job["spec"]["parallelism"] = "18"
    with pytest.raises(kv.ValidationError):
        kv.validate(job, K8S_VERSIONS[0], strict=True)


def test_every_builtin_kind_has_a_schema() -> None:
    """No manifest slips through as 'schema not found'."""
    kv = kubernetes_validate()
    for name, doc in BUILTIN_DOCS:
        try:
            kv.validate(doc, K8S_VERSIONS[0], strict=True)
        except kv.SchemaNotFoundError:
            pytest.fail(f"{name}: no schema for {doc['apiVersion']} {doc['kind']}")


# ------------------------------------------------------------------------------------------- the CRDs
@pytest.mark.parametrize("name", ["gpuclusters.nvidia.com", "clusters.rackscale.io"])
def test_crd_is_a_valid_crd(name: str) -> None:
    kv = kubernetes_validate()
    doc = crd(name)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    kv.validate(doc, K8S_VERSIONS[0], strict=True)
    spec = doc["spec"]
    assert name == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["scope"] == "Cluster"
    (version,) = spec["versions"]
    assert version["served"] and version["storage"]


def test_gpucluster_crd_names_and_printer_columns() -> None:
    spec = crd("gpuclusters.nvidia.com")["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["versions"][0]["name"]) == ("nvidia.com", "GpuCluster", "v1")
    columns = {c["jsonPath"]: c["type"] for c in spec["versions"][0]["additionalPrinterColumns"]}
    assert columns[".spec.gpuType"] == "string"
    assert columns[".spec.gpuCount"] == "integer"


def _schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path or "<root>", node)]
    for key, child in node.get("properties", {}).items():
        nodes += _schema_nodes(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        nodes += _schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        nodes += _schema_nodes(node["additionalProperties"], f"{path}{{}}")
    return nodes


@pytest.mark.parametrize("name", ["gpuclusters.nvidia.com", "clusters.rackscale.io"])
def test_crd_schema_is_structural(name: str) -> None:
    """What the API server demands of a CRD schema (a subset of its checks): a type on every node (or
    preserve-unknown-fields), no additionalProperties beside properties, no `additionalProperties: false`."""
    for path, node in _schema_nodes(crd_raw_schema(name)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{path}: no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties", True) is not False, path
        if node.get("type") == "object" and path not in ("<root>", ".metadata"):
            assert (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            ), f"{path}: an object with no properties"


def test_gpucluster_crd_covers_exactly_rackscales_seed_fields() -> None:
    from rackscale.model.spec_docs import SeedSpecDoc

    schema = crd_raw_schema("gpuclusters.nvidia.com")["properties"]["spec"]
    fields = {f.alias for f in SeedSpecDoc.model_fields.values()}
    assert set(schema["properties"]) == fields
    required = {f.alias for f in SeedSpecDoc.model_fields.values() if f.is_required()}
    assert set(schema["required"]) == required


def test_cluster_crd_covers_exactly_rackscales_rich_fields() -> None:
    from rackscale.model.spec_docs import ClusterSpecDoc

    schema = crd_raw_schema("clusters.rackscale.io")["properties"]["spec"]
    assert set(schema["properties"]) == {f.alias for f in ClusterSpecDoc.model_fields.values()}


def test_sample_validates_against_the_crd_and_loads_with_rackscale() -> None:
    sample = docs_of("gpucluster-sample.yaml")[0]
    crd_validator("gpuclusters.nvidia.com").validate(sample)
    cluster = parse_cluster_text((KDIR / "gpucluster-sample.yaml").read_text(), source="gpucluster-sample.yaml")
    assert cluster.total_gpus == SEED_GPUS
    assert cluster == load_cluster(EXAMPLES / "seed-gpucluster.yaml")
    # The sample is the seed's resource as written.
    assert sample == yaml.safe_load((EXAMPLES / "seed-gpucluster.yaml").read_text())


SEED_VALID = [
    pytest.param(seed(), id="seed"),
    pytest.param(seed(nvlink="disabled", rdma="disabled"), id="nvlink-rdma-disabled"),
    pytest.param(seed(gpusPerNode=8, gpuCount=64), id="8-per-node"),
    pytest.param(seed(nodesPerRack=9, pricePerGpuHour=3.5), id="nodes-per-rack-and-price"),
    pytest.param(seed(nvlink=_DELETE, rdma=_DELETE), id="toggles-defaulted"),
    pytest.param(seed(gpuCount=100), id="partial-last-rack"),
]

SEED_INVALID = [
    pytest.param(seed(gpuCount=0), id="gpuCount-0"),
    pytest.param(seed(gpuCount=-4), id="gpuCount-negative"),
    pytest.param(seed(gpuCount="72"), id="gpuCount-string"),
    pytest.param(seed(gpuType=_DELETE), id="gpuType-missing"),
    pytest.param(seed(gpuCount=_DELETE), id="gpuCount-missing"),
    pytest.param(seed(gpuType=""), id="gpuType-empty"),
    pytest.param(seed(nvlink="maybe"), id="nvlink-maybe"),
    pytest.param(seed(rdma="on"), id="rdma-on"),
    pytest.param(seed(gpusPerNode=65, gpuCount=65), id="gpusPerNode-65"),
    pytest.param(seed(nodesPerRack=0), id="nodesPerRack-0"),
    pytest.param(seed(pricePerGpuHour=-1), id="price-negative"),
    pytest.param(seed(gpuCounts=72), id="unknown-field"),
    pytest.param({k: v for k, v in seed().items() if k != "spec"}, id="spec-missing"),
]


@pytest.mark.parametrize("doc", SEED_VALID)
def test_seed_variants_accepted_by_crd_and_rackscale(doc: dict[str, Any]) -> None:
    crd_validator("gpuclusters.nvidia.com").validate(doc)
    assert rackscale_accepts(doc)


@pytest.mark.parametrize("doc", SEED_INVALID)
def test_invalid_gpucluster_refused_by_crd_and_rackscale(doc: dict[str, Any]) -> None:
    assert not crd_validator("gpuclusters.nvidia.com").is_valid(doc), "the CRD schema accepts it"
    assert not rackscale_accepts(doc), "rackscale's loader accepts it"


@pytest.mark.parametrize("example", ["cluster-nvl72.yaml", "cluster-hetero.yaml"])
def test_rich_examples_validate_against_the_cluster_crd_and_load(example: str) -> None:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    crd_validator("clusters.rackscale.io").validate(doc)
    assert load_cluster(EXAMPLES / example).total_gpus > 0


RICH_INVALID = [
    pytest.param(rich("regions", 0), id="regions-0"),
    pytest.param(rich("gpusPerNode", 65), id="gpusPerNode-65"),
    pytest.param(rich("tiers.rdma.bandwidthGbps", 0), id="bandwidth-0"),
    pytest.param(rich("tiers.rdma.latencyUs", -1), id="latency-negative"),
    pytest.param(rich("pools", []), id="pools-empty"),
    pytest.param(rich("topology.levels", [{"name": "rack", "labelKey": "x"}]), id="levels-1"),
    pytest.param(rich("pricing.perGpuHour", -1), id="price-negative"),
    pytest.param(rich("node.cpu", 0), id="node-cpu-0"),
    pytest.param(rich("gpuSpeed", {"H100": "fast"}), id="gpuSpeed-string"),
    pytest.param(rich("racksPerRegions", 4), id="unknown-field"),
]


@pytest.mark.parametrize("doc", RICH_INVALID)
def test_invalid_cluster_refused_by_crd_and_rackscale(doc: dict[str, Any]) -> None:
    assert not crd_validator("clusters.rackscale.io").is_valid(doc), "the CRD schema accepts it"
    assert not rackscale_accepts(doc), "rackscale's loader accepts it"


def test_scheduler_config_holds_the_same_cluster_as_the_sample() -> None:
    data = one("ConfigMap", "rackscale-scheduler-config")["data"]
    assert yaml.safe_load(data["cluster.yaml"]) == docs_of("gpucluster-sample.yaml")[0]
    assert parse_cluster_text(data["cluster.yaml"]).total_gpus == SEED_GPUS
    settings = yaml.safe_load(data["scheduler.yaml"])
    assert settings["schedulerName"] == "rackscale"
    assert settings["labels"]["rack"] == "nvidia.com/gpu.clique"
    assert settings["annotations"] == {"podGroup": "rackscale.io/pod-group", "minMember": "rackscale.io/min-member"}
    assert settings["leaderElection"] == {"leaseName": "rackscale", "leaseNamespace": "kube-system"}


# ------------------------------------------------------------------------------------------- training job
def test_training_job_is_a_72_gpu_gang_of_18_by_4() -> None:
    job = one("Job", "llm-pretrain-72")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 18
    pod = pod_spec(job)
    (container,) = pod["containers"]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert int(limits[GPU]) == 4 and requests.get(GPU, limits[GPU]) == limits[GPU]
    assert spec["parallelism"] * int(limits[GPU]) == SEED_GPUS
    # The seed's 2048Gi memory limit, per pod; the request fits one node of rackscale's node model.
    assert limits["memory"] == "2048Gi"
    assert gib(requests["memory"]) <= NODE_MEMORY_GIB
    assert pod["schedulerName"] == "rackscale"
    assert pod["nodeSelector"] == {"gpu-type": "A100"}
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["rackscale.io/pod-group"] == "llm-pretrain-72"
    assert annotations["rackscale.io/min-member"] == str(spec["parallelism"])


def test_training_job_places_one_pod_per_node() -> None:
    job = one("Job", "llm-pretrain-72")
    pod = pod_spec(job)
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    # The anti-affinity selects the job's own pods.
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    # 4 GPUs per pod on the seed's 4-GPU nodes: one pod fills a node.
    gpus_per_node = parse_cluster_text(yaml.safe_dump(docs_of("gpucluster-sample.yaml")[0])).nodes[0].gpus
    assert int(pod["containers"][0]["resources"]["limits"][GPU]) == gpus_per_node


def test_training_job_priority_class_exists_with_the_seeds_value() -> None:
    pod = pod_spec(one("Job", "llm-pretrain-72"))
    pc = one("PriorityClass", pod["priorityClassName"])
    assert pc["metadata"]["name"] == "high-priority"
    assert pc["value"] == SEED_PRIORITY
    assert pc["globalDefault"] is False


def test_a_preempted_training_pod_is_no_failure_of_its_job() -> None:
    """rackscale's preemption marks a victim DisruptionTarget (docs/kubernetes.md, Preemption): the Job ignores
    such a pod's failure, so preemptions do not use up its backoffLimit. (podFailurePolicy needs restartPolicy
    Never, as the API server validates.)"""
    job = one("Job", "llm-pretrain-72")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert int(pod_spec(job).get("terminationGracePeriodSeconds", 30)) >= 30  # time to checkpoint on SIGTERM


def test_every_storage_class_named_exists() -> None:
    classes = {d["metadata"]["name"] for _, d in all_docs() if d["kind"] == "StorageClass"}
    assert classes == {"high-speed-storage"}
    sc = one("StorageClass", "high-speed-storage")
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    claims = [d["spec"] for _, d in all_docs() if d["kind"] == "PersistentVolumeClaim"]
    claims += [
        t["spec"] for _, d in all_docs() if d["kind"] == "StatefulSet" for t in d["spec"]["volumeClaimTemplates"]
    ]
    assert len(claims) >= 2
    for claim in claims:
        assert claim["storageClassName"] in classes


def test_training_job_mounts_its_high_speed_claim() -> None:
    pod = pod_spec(one("Job", "llm-pretrain-72"))
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    (claim,) = claims
    pvc = one("PersistentVolumeClaim", claim)
    assert pvc["spec"]["storageClassName"] == "high-speed-storage"
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]  # shared by the 18 pods


# ------------------------------------------------------------------------------------------- inference
def test_inference_deployment_is_8_replicas_of_1_gpu() -> None:
    deployment = one("Deployment", "chat-serving")
    assert deployment["spec"]["replicas"] == 8
    pod = pod_spec(deployment)
    assert pod["schedulerName"] == "rackscale"
    (container,) = pod["containers"]
    assert int(container["resources"]["limits"][GPU]) == 1


def test_inference_hpa_targets_the_deployment() -> None:
    hpa = one("HorizontalPodAutoscaler", "chat-serving")
    deployment = one("Deployment", "chat-serving")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "chat-serving")
    assert hpa["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert hpa["spec"]["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    example = yaml.safe_load((EXAMPLES / "inference.yaml").read_text())["spec"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (example["minReplicas"], example["maxReplicas"])
    # A CPU-utilisation target needs a CPU request on every container.
    assert all("cpu" in c["resources"]["requests"] for c in pod_spec(deployment)["containers"])


def test_services_select_their_pods() -> None:
    for _, svc in all_docs():
        if svc["kind"] != "Service":
            continue
        selector = svc["spec"]["selector"]
        matched = [
            d
            for _, d in all_docs()
            if d["kind"] in ("Deployment", "StatefulSet", "Job")
            and d["metadata"]["namespace"] == svc["metadata"]["namespace"]
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matched, f"Service {svc['metadata']['name']} selects no pods"


# ------------------------------------------------------------------------------------------- RBAC
# What `rackscale kube-scheduler` does with the API, and so exactly what it is granted.
SCHEDULER_CLUSTER_GRANTS = {
    ("", "nodes"): {"get", "list", "watch"},
    ("", "pods"): {"get", "list", "watch", "delete"},  # delete: the undo of a gang bound part-way, and preemption
    ("", "pods/binding"): {"create"},
    ("", "pods/status"): {"patch"},
    ("", "events"): {"create"},
    ("events.k8s.io", "events"): {"create"},
    ("apps", "deployments/scale"): {"patch"},  # ScalingSchedule steps on Deployments (kube/schedules.py)
    ("policy", "poddisruptionbudgets"): {"list", "watch"},  # preemption prefers victims they allow (kube/budgets.py)
}
LEASE_GRANTS = {(None, "create"), ("rackscale", "get"), ("rackscale", "update")}
# --las-preemption's record of the gangs' attained service, a ConfigMap named after the Lease (kube/attained.py).
RECORD = "rackscale-attained-service"
RECORD_GRANTS = {(None, "create"), (RECORD, "get"), (RECORD, "update")}


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_scheduler_cluster_role_grants_exactly_what_it_needs() -> None:
    role = one("ClusterRole", "rackscale-scheduler")
    assert not any("resourceNames" in r for r in role["rules"])
    assert grants(role["rules"]) == SCHEDULER_CLUSTER_GRANTS


@pytest.mark.parametrize(
    ("role_name", "group", "resource", "want"),
    [
        pytest.param("rackscale-scheduler-leader-election", "coordination.k8s.io", "leases", LEASE_GRANTS, id="lease"),
        pytest.param("rackscale-scheduler-attained-service", "", "configmaps", RECORD_GRANTS, id="las-record"),
    ],
)
def test_scheduler_namespaced_roles_are_limited_to_their_object(
    role_name: str, group: str, resource: str, want: set[tuple[str | None, str]]
) -> None:
    role = one("Role", role_name)
    assert role["metadata"]["namespace"] == "kube-system"  # the lease's namespace, where the record is kept too
    got = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == [group] and rule["resources"] == [resource]
        for verb in rule["verbs"]:
            for name in rule.get("resourceNames", [None]):
                got.add((name, verb))
    assert got == want


def test_the_record_role_names_the_configmap_the_scheduler_uses() -> None:
    client = pytest.importorskip("kubernetes.client")
    from rackscale.kube.scheduler import KubeScheduler, KubeSchedulerConfig

    settings = yaml.safe_load(one("ConfigMap", "rackscale-scheduler-config")["data"]["scheduler.yaml"])
    lease = settings["leaderElection"]
    config = KubeSchedulerConfig(
        las_preemption=True, lease_name=lease["leaseName"], lease_namespace=lease["leaseNamespace"]
    )
    record = KubeScheduler(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), config).record
    assert record is not None and (record.namespace, record.name) == ("kube-system", RECORD)


def test_bindings_bind_the_scheduler_service_account() -> None:
    deployment = one("Deployment", "rackscale-scheduler")
    sa_name = pod_spec(deployment)["serviceAccountName"]
    sa = one("ServiceAccount", sa_name)
    for kind, role_kind, role_name in (
        ("ClusterRoleBinding", "ClusterRole", "rackscale-scheduler"),
        ("RoleBinding", "Role", "rackscale-scheduler-leader-election"),
        ("RoleBinding", "Role", "rackscale-scheduler-attained-service"),
    ):
        binding = one(kind, role_name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa_name, "namespace": sa["metadata"]["namespace"]}
        ]
        if kind == "RoleBinding":
            assert binding["metadata"]["namespace"] == one(role_kind, role_name)["metadata"]["namespace"]


# ------------------------------------------------------------------------------------------- rackscale's pods
def _non_root(workload: dict[str, Any]) -> None:
    pod = pod_spec(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert container["livenessProbe"] and container["readinessProbe"]
        assert "memory" in container["resources"]["limits"]


def test_scheduler_deployment() -> None:
    deployment = one("Deployment", "rackscale-scheduler")
    _non_root(deployment)
    (container,) = pod_spec(deployment)["containers"]
    assert container["command"] == ["rackscale"]
    assert container["args"][0] == "kube-scheduler"
    assert "--scheduler-name=rackscale" in container["args"]
    assert "metrics" in {p["name"] for p in container["ports"]}
    config_maps = {v["configMap"]["name"] for v in pod_spec(deployment)["volumes"] if "configMap" in v}
    assert config_maps == {"rackscale-scheduler-config"}
    # Its own pods must not wait for a rackscale scheduler.
    assert "schedulerName" not in pod_spec(deployment)


def test_service_statefulset() -> None:
    sts = one("StatefulSet", "rackscale")
    assert sts["spec"]["replicas"] == 2  # highly available on PostgreSQL: one leads (docs/high-availability.md)
    _non_root(sts)
    pod = pod_spec(sts)
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "serve"
    assert {"--host=0.0.0.0", "--tokens=/etc/rackscale/tokens.yaml", "--data-dir=/var/lib/rackscale"} <= set(args)
    assert {"--db-url=$(RACKSCALE_DB_URL)", "--replica-id=$(POD_NAME)"} <= set(args)  # one id per pod
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["RACKSCALE_DB_URL"]["secretKeyRef"]["name"] == "rackscale-db"
    assert {p["path"] for p in (container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"])} == {
        "/healthz",
        "/readyz",
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "rackscale-tokens"
    assert mounts["tokens"]["mountPath"] == "/etc/rackscale/tokens.yaml"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]]["mountPath"] == "/var/lib/rackscale"
    svc = one("Service", sts["spec"]["serviceName"])
    assert svc["spec"]["ports"][0]["port"] == 8080


def test_namespaced_objects_use_known_namespaces() -> None:
    namespaces = {d["metadata"]["name"] for _, d in all_docs() if d["kind"] == "Namespace"} | {"kube-system"}
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "StorageClass",
        "CustomResourceDefinition",
        "GpuCluster",
        "Kustomization",
    }
    for name, doc in all_docs():
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in doc.get("metadata", {}), f"{name}: {doc['kind']} is cluster-scoped"
        else:
            assert doc["metadata"].get("namespace") in namespaces, f"{name}: {doc['kind']} without a known namespace"


# ------------------------------------------------------------------------------------------- monitoring
def gen_configmaps() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_configmaps", KDIR / "gen_configmaps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_monitoring_configmaps_are_regenerated_byte_for_byte() -> None:
    expected = gen_configmaps().render()
    assert (KDIR / "monitoring.yaml").read_text(encoding="utf-8") == expected, (
        "deploy/kubernetes/monitoring.yaml is out of date: run python deploy/kubernetes/gen_configmaps.py"
    )


@pytest.mark.parametrize(
    ("configmap", "key", "source", "label"),
    [
        ("rackscale-prometheus-rules", "rules.yml", "prometheus/rules.yml", "prometheus_rule"),
        ("rackscale-grafana-dashboard", "rackscale.json", "grafana/rackscale.json", "grafana_dashboard"),
    ],
)
def test_monitoring_configmap_holds_the_source_file(configmap: str, key: str, source: str, label: str) -> None:
    cm = one("ConfigMap", configmap)
    assert cm["data"][key] == (ROOT / "deploy" / source).read_text(encoding="utf-8")
    assert cm["metadata"]["labels"][label] == "1"


@pytest.mark.parametrize(
    "text",
    ["a\nb\n", "a\nb", "a\n\n\n", "x:\n  - 'y'   \n\n  z: |\n    w\n", '{\n  "a": [1, 2]\n}\n', "tab\there\n"],
    ids=["clip", "strip", "keep", "nested-yaml", "json", "tab"],
)
def test_block_scalar_round_trips(text: str) -> None:
    out = "data:\n  key: " + gen_configmaps().block_scalar(text, "    ")
    assert yaml.safe_load(out)["data"]["key"] == text


# ------------------------------------------------------------------------------------------- kustomize
def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = docs_of("kustomization.yaml")
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    files = {p.name for p in manifest_files()} - {"kustomization.yaml"}
    assert set(listed) == files


def test_kustomize_build_renders_every_object() -> None:
    """`kubectl kustomize` (kustomize built into kubectl; offline) renders exactly the objects of the files."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the file-level check above still ran)")
    r = subprocess.run([kubectl, "kustomize", str(KDIR)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    built = sorted((d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(r.stdout) if d)
    expected = sorted((d["kind"], d["metadata"]["name"]) for _, d in all_docs() if d["kind"] != "Kustomization")
    assert built == expected
