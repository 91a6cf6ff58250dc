"""
The cluster definitions in cluster/ parse, and hold the fields that matter to the job's real command line and to
pyproject.toml: entry point and arguments (read by the job's own parser and validation), image and Ray version,
dependencies installed by setup commands or the runtime environment, and GPUs per worker = one reader per GPU.
The launcher config validates against Ray's own schema, the RayJob manifest against the CRD of the KubeRay release
the guide names (kept in tests/cluster/data/).
"""

import copy
import gzip
import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from jobs import submit
from jobs.bulk_qa import build_parser
from jobs.bulk_qa.config import load_config
from tests.cluster.cluster_testing import ROOT

CLUSTER = ROOT / "cluster"
DATA = Path(__file__).parent / "data"
GUIDE = ROOT / "docs" / "how-to" / "clusters.md"  # the walkthrough of the definitions in cluster/
ENTRYPOINT = ["python", "-m", "jobs.bulk_qa"]


def ray_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    [pin] = [d for d in dependencies if re.match(r"ray\s*(\[|==)", d)]
    return pin.split("==")[1]


def gpu_image() -> str:
    return f"rayproject/ray:{ray_version()}-py311-gpu"


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def job_config(job_args: list[str]):
    """The job's configuration for these arguments, by its own parser and validation."""
    build_parser().parse_args(job_args)  # an unknown flag exits here
    return load_config(job_args)


def check_remote_job(job_args: list[str], gpus: int) -> None:
    """Arguments of a job for a cluster with `gpus` GPUs: storage URIs, and one reader actor per GPU."""
    config = job_config(job_args)
    for name in ("questions", "documents", "output"):
        assert "://" in config.to_dict()[name], f"--{name} must be object storage on a cluster"
    assert config.run.num_actors == gpus
    assert config.run.gpus_per_actor == 1


def readme_block(marker: str) -> list[str]:
    """The command of the code block after `<!-- MARKER -->` (other comments between) in the clusters guide."""
    text = GUIDE.read_text()
    found = re.search(rf"<!-- {re.escape(marker)} -->\s*(?:<!--[^>]*-->\s*)*```bash\n(.*?)```", text, re.DOTALL)
    assert found, f"{GUIDE.relative_to(ROOT)} has no block after <!-- {marker} -->"
    return shlex.split(found.group(1).replace("\\\n", " "))


def after_double_dash(args: list[str]) -> list[str]:
    return args[args.index("--") + 1 :]


# The AWS cluster launcher config.


@pytest.fixture(scope="module")
def launcher() -> dict:
    return load_yaml("aws-gpu.yaml")


def gpu_workers(launcher: dict) -> tuple[int, int]:
    """(worker nodes, GPUs per node) of the launcher's GPU node type."""
    [(name, node)] = [(k, v) for k, v in launcher["available_node_types"].items() if v["resources"].get("GPU")]
    assert name != launcher["head_node_type"]
    assert node["min_workers"] == node["max_workers"], "a fixed GPU pool: the job sizes its readers when it starts"
    return node["max_workers"], node["resources"]["GPU"]


def test_launcher_config_is_valid_for_ray_up(launcher):
    # Ray's own schema and defaults, as `ray up` applies them: it raises on an invalid config, returns None.
    assert validate_config(prepare_config(launcher)) is None
    broken = {**launcher, "max_workers": "many"}  # and it does check: the same config with one value broken
    with pytest.raises(jsonschema.ValidationError, match="'many' is not of type 'integer'"):
        validate_config(prepare_config(broken))


def test_launcher_runs_the_projects_ray_in_a_gpu_image(launcher):
    assert launcher["docker"]["image"] == gpu_image()
    assert launcher["provider"]["type"] == "aws"


def test_launcher_setup_installs_the_project_dependencies(launcher):
    [command] = launcher["setup_commands"]
    args = shlex.split(command)
    assert args[:2] == ["pip", "install"]
    assert [arg for arg in args[2:] if not arg.startswith("-")] == submit.project_requirements()


def test_launcher_has_one_gpu_per_worker_and_room_for_them(launcher):
    workers, gpus_per_worker = gpu_workers(launcher)
    assert gpus_per_worker == 1
    assert launcher["max_workers"] >= workers
    head = launcher["available_node_types"][launcher["head_node_type"]]
    assert not head["resources"].get("GPU")


def test_the_guide_lets_the_head_pass_the_workers_instance_profile(launcher):
    """The head's autoscaler launches the workers with their instance profile: the guide's policy gives the head's
    role (the one Ray creates, named as the profile) iam:PassRole on that profile's role, in the file and the
    command alike."""
    [worker] = [node for name, node in launcher["available_node_types"].items() if name != launcher["head_node_type"]]
    profile = worker["node_config"]["IamInstanceProfile"]["Name"]
    guide = GUIDE.read_text()
    [shown] = re.findall(r"```json\n(.*?)```", guide, re.DOTALL)
    [statement] = json.loads(shown)["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "iam:PassRole"
    assert statement["Resource"] == f"arn:aws:iam::ACCOUNT-ID:role/{profile}"
    command = re.search(r"aws iam put-role-policy (.*?)\n\s*ray exec", guide.replace("\\\n", " "), re.DOTALL)
    args = shlex.split(command.group(1))
    assert args[args.index("--role-name") + 1] == profile
    policy = json.loads(args[args.index("--policy-document") + 1].replace("$ACCOUNT", "ACCOUNT-ID"))
    assert policy == json.loads(shown)


def test_readme_submits_to_the_launcher_cluster_one_reader_per_gpu(launcher, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = readme_block("submit:aws-gpu")
    assert args[:3] == ["python", "-m", "jobs.submit"]
    submit.build_parser().parse_args(args[3 : args.index("--")])
    workers, gpus_per_worker = gpu_workers(launcher)
    check_remote_job(after_double_dash(args), workers * gpus_per_worker)


# The KubeRay RayJob manifest.


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return load_yaml("kuberay-rayjob.yaml")


def kuberay_crd() -> tuple[str, dict]:
    """(KubeRay version, the RayJob CRD of that release), from tests/cluster/data/."""
    [path] = DATA.glob("kuberay-v*-ray.io_rayjobs.yaml.gz")
    version = re.match(r"kuberay-v([\d.]+)-", path.name).group(1)
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return version, yaml.load(file, Loader=yaml.CSafeLoader)


def strict(schema: dict) -> dict:
    """A Kubernetes structural schema as JSON Schema that rejects unknown fields, as `kubectl apply
    --validate=strict` does: every object with properties allows no others, unless it preserves unknown fields."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                if not node.get("x-kubernetes-preserve-unknown-fields"):
                    node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


@pytest.fixture(scope="module")
def rayjob_schema(rayjob) -> tuple[str, jsonschema.protocols.Validator]:
    """(KubeRay version, a validator of the manifest's API version in that release's CRD)."""
    version, crd = kuberay_crd()
    group, api_version = rayjob["apiVersion"].split("/")
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, rayjob["kind"])
    [served] = [each for each in crd["spec"]["versions"] if each["name"] == api_version]
    assert served["served"] and served["storage"]
    schema = strict(served["schema"]["openAPIV3Schema"])
    return version, jsonschema.Draft7Validator(schema)


def test_rayjob_is_valid_against_the_kuberay_crd(rayjob, rayjob_schema):
    _, validator = rayjob_schema
    errors = [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(rayjob)]
    assert not errors, errors
    # And it does check: a misspelt field, a value of the wrong type.
    typo = copy.deepcopy(rayjob)
    typo["spec"]["shutdownAfterJobFinish"] = typo["spec"].pop("shutdownAfterJobFinishes")
    with pytest.raises(jsonschema.ValidationError, match="shutdownAfterJobFinish"):
        validator.validate(typo)
    wrong = copy.deepcopy(rayjob)
    wrong["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'integer'"):
        validator.validate(wrong)


def test_the_guide_names_the_versions_the_files_were_checked_against(rayjob_schema):
    kuberay, _ = rayjob_schema
    guide = GUIDE.read_text()
    assert re.search(rf"\*\*Ray {re.escape(ray_version())}\*\*", guide)
    assert re.search(rf"\*\*KubeRay {re.escape(kuberay)}\*\*", guide)
    assert f"KubeRay {kuberay}" in (CLUSTER / "kuberay-rayjob.yaml").read_text()


def test_the_guide_waits_for_the_submitter_before_following_its_logs():
    """KubeRay creates the submitter Job (named as the RayJob) once the cluster is ready: `kubectl logs` comes
    after a wait for the RayJob's Running deployment status and for the pod."""
    guide = GUIDE.read_text()
    lines = [line.strip() for line in guide.splitlines() if line.strip().startswith("kubectl ")]
    logs = next(index for index, line in enumerate(lines) if line.startswith("kubectl logs -f -l job-name=bulk-qa"))
    assert lines[logs - 2] == (
        "kubectl wait rayjob/bulk-qa --for=jsonpath='{.status.jobDeploymentStatus}'=Running --timeout=30m"
    )
    assert lines[logs - 1].startswith("kubectl wait pod -l job-name=bulk-qa --for=condition=Ready")


def test_the_guides_edits_run_with_gnu_and_bsd_sed():
    """`sed -i` without a suffix fails on macOS; `-i.bak`, the suffix attached, works with both."""
    for path in [GUIDE, *sorted(CLUSTER.iterdir())]:
        for command in re.findall(r"\bsed\s+(-\S+)", path.read_text()):
            assert not command.startswith("-i") or len(command) > 2, f"{path.name}: sed {command}"


def containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def test_rayjob_deletes_its_cluster_when_the_job_ends(rayjob):
    assert rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["kind"] == "RayJob"
    assert rayjob["spec"]["shutdownAfterJobFinishes"] is True
    assert rayjob["spec"]["ttlSecondsAfterFinished"] >= 0


def test_rayjob_runs_the_projects_ray_in_a_gpu_image(rayjob):
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == ray_version()
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    assert {container["image"] for group in groups for container in containers(group)} == {gpu_image()}


def test_rayjob_runtime_env_installs_the_project(rayjob):
    runtime_env = yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"])
    assert runtime_env["pip"] == submit.project_requirements()
    # The project's code as a remote archive: a manifest cannot upload a local folder.
    assert re.match(r"(https|s3|gs)://.+\.zip$", runtime_env["working_dir"])


def rayjob_gpus(rayjob: dict) -> int:
    """GPUs of the RayJob's cluster, checking one per worker pod, requested as limited, in a fixed-size group."""
    total = 0
    for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        [container] = containers(group)
        resources = container["resources"]
        gpus = int(resources["limits"].get("nvidia.com/gpu", 0))
        assert int(resources["requests"].get("nvidia.com/gpu", 0)) == gpus
        if gpus:
            assert gpus == 1
            assert group["replicas"] == group["minReplicas"] == group["maxReplicas"]
            total += group["replicas"] * gpus
    head = containers(rayjob["spec"]["rayClusterSpec"]["headGroupSpec"])[0]
    assert "nvidia.com/gpu" not in head["resources"].get("limits", {})
    return total


def test_rayjob_entrypoint_is_the_job_with_one_reader_per_gpu(rayjob):
    args = shlex.split(rayjob["spec"]["entrypoint"])
    assert args[:3] == ENTRYPOINT
    gpus = rayjob_gpus(rayjob)
    assert gpus >= 1
    check_remote_job(args[3:], gpus)


def test_both_clusters_run_the_same_job(rayjob):
    """The RayJob's entry point and the launcher's submission differ only in their number of GPUs."""

    def without_num_actors(args: list[str]) -> list[str]:
        index = args.index("--num-actors")
        return args[:index] + args[index + 2 :]

    launcher_job = after_double_dash(readme_block("submit:aws-gpu"))
    rayjob_job = shlex.split(rayjob["spec"]["entrypoint"])[3:]
    assert without_num_actors(launcher_job) == without_num_actors(rayjob_job)


# The runtime environment for `ray job submit`, and the README's commands.


def test_runtime_env_file_is_what_jobs_submit_sends():
    expected = submit.build_runtime_env(ROOT)
    del expected["working_dir"]  # given by `ray job submit --working-dir .`
    assert load_yaml("runtime-env.yaml") == expected


def test_readme_submit_example_parses(monkeypatch):
    monkeypatch.chdir(ROOT)
    args = readme_block("submit:example")
    own = submit.build_parser().parse_args(args[3 : args.index("--")])
    assert own.address == "http://HEAD:8265"
    check_remote_job(after_double_dash(args), 4)


def test_readme_ray_cli_submission_uses_the_runtime_env_file(monkeypatch):
    monkeypatch.chdir(ROOT)
    args = readme_block("submit:ray-cli")
    assert args[:3] == ["ray", "job", "submit"]
    own = args[: args.index("--")]
    assert own[own.index("--runtime-env") + 1] == "cluster/runtime-env.yaml"
    assert own[own.index("--working-dir") + 1] == "."
    job = after_double_dash(args)
    assert job[:3] == ENTRYPOINT
    assert job[3:] == after_double_dash(readme_block("submit:example"))


def documented_commands() -> list[tuple[str, str]]:
    """(file, command) for each `python -m jobs.bulk_qa|jobs.submit` command line in the clusters guide, cluster/'s
    README and its YAML comments, continuation lines joined; inline code in prose (between backticks) is left out."""
    commands = []
    for path in [GUIDE, *sorted(CLUSTER.iterdir())]:
        lines = path.read_text().splitlines()
        if path.suffix == ".yaml":
            lines = [re.sub(r"^\s*#\s?", "", line) for line in lines if line.lstrip().startswith("#")]
        text = "\n".join(lines).replace("\\\n", " ")
        for line in text.splitlines():
            found = re.search(r"python -m jobs\.(bulk_qa|submit) .*", line)
            if found and "`" not in line:
                commands.append((path.name, found.group(0)))
    return commands


def test_every_job_command_in_the_cluster_docs_parses(monkeypatch):
    monkeypatch.chdir(ROOT)
    commands = documented_commands()
    assert len(commands) >= 4
    for _, command in commands:
        args = shlex.split(command)
        if args[2] == "jobs.submit":
            submit.build_parser().parse_args(args[3 : args.index("--")])
            job_config(after_double_dash(args))
        else:
            job_config(args[3:])
