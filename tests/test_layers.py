"""
The layers the tree promises: `qa_core` imports neither Ray nor `jobs`; the modules `jobs/` shares between the
bulk job, the index build and ingestion import none of the three; the bulk job's worker side imports only `qa_core`,
itself and the shared modules workers use, never its driver side; the index command, the index build, retrieval on
Ray and the benchmarks import nothing of the bulk job. Read from the source, so that a lazy import counts too.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What runs in Ray's workers may import these `jobs/` modules besides its own package: they import only each other.
WORKER_SAFE = (
    "jobs.storage", "jobs.passages", "jobs.retrieval_settings", "jobs.ranker_settings", "jobs.table_schema",
    "jobs.retrieval.retrieve", "jobs.retrieval.retrieve_dense",  # the retrieval actors
)  # fmt: skip
# The modules below the bulk job, the index build and ingestion, which all three use.
SHARED = (
    *WORKER_SAFE, "jobs.engines", "jobs.in_process", "jobs.tables", "jobs.run_settings", "jobs.ray_start",
    "jobs.ray_logs", "jobs.shared_paths", "jobs.path_probe", "jobs.options",
)  # fmt: skip

def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (absolute names; relative imports are not used here)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
    return found


def module_name(path: Path) -> str:
    """`qa_core/ingest/convert.py` -> `qa_core.ingest.convert`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(folder: str) -> list[Path]:
    paths = sorted((ROOT / folder).rglob("*.py"))
    assert paths, folder
    return paths


@pytest.mark.parametrize("path", modules("qa_core"), ids=lambda path: str(path.relative_to(ROOT)))
def test_qa_core_imports_neither_ray_nor_jobs(path: Path) -> None:
    offending = {name for name in imported_modules(path) if name.split(".")[0] in ("ray", "jobs")}
    assert not offending, f"{path.relative_to(ROOT)} imports {sorted(offending)}"


@pytest.mark.parametrize("path", modules("jobs/bulk_qa/workers"), ids=lambda path: str(path.relative_to(ROOT)))
def test_worker_side_imports_nothing_of_the_driver_side(path: Path) -> None:
    jobs_imports = {name for name in imported_modules(path) if name.split(".")[0] == "jobs"}
    driver_side = {name for name in jobs_imports if not name.startswith("jobs.bulk_qa.workers")} - set(WORKER_SAFE)
    assert not driver_side, f"{path.relative_to(ROOT)} imports {sorted(driver_side)}"


def shared_and_below_the_bulk_job() -> list[Path]:
    """The shared modules, and the index build's, retrieval's and ingestion's packages, which the bulk job uses."""
    shared = [ROOT / f"{name.replace('.', '/')}.py" for name in SHARED]
    return shared + modules("jobs/indexing") + modules("jobs/retrieval") + modules("jobs/ingest")


@pytest.mark.parametrize("path", shared_and_below_the_bulk_job(), ids=lambda path: str(path.relative_to(ROOT)))
def test_what_the_bulk_job_uses_imports_nothing_of_it(path: Path) -> None:
    """No import runs back up into `jobs.bulk_qa` (nor, from a shared module, into the packages that use it)."""
    jobs_imports = {name for name in imported_modules(path) if name.split(".")[0] == "jobs"}
    upward = {name for name in jobs_imports if name.startswith("jobs.bulk_qa")}
    if path.parent == ROOT / "jobs":
        upward |= {name for name in jobs_imports if name not in SHARED}
    assert not upward, f"{path.relative_to(ROOT)} imports {sorted(upward)}"


@pytest.mark.parametrize("path", modules("qa_core"), ids=lambda path: str(path.relative_to(ROOT)))
def test_qa_core_imports_no_haystack(path: Path) -> None:
    """Haystack is the parity suite's reference (a test dependency), never the core's."""
    offending = {name for name in imported_modules(path) if name.split(".")[0] == "haystack"}
    assert not offending, f"{path.relative_to(ROOT)} imports {sorted(offending)}"


def test_ingest_stage_imports_nothing_of_the_driver_side() -> None:
    """
    What runs in Ray's workers for jobs.ingest (stage.py) imports `qa_core` and the worker-safe shared modules (its
    filesystems), never a driver: the CLI, the ingestion run, the bulk job.
    """
    jobs_imports = {name for name in imported_modules(ROOT / "jobs/ingest/stage.py") if name.split(".")[0] == "jobs"}
    driver_side = jobs_imports - set(WORKER_SAFE)
    assert not driver_side, f"jobs/ingest/stage.py imports {sorted(driver_side)}"


def test_the_local_model_builders_import_nothing_of_training() -> None:
    """The random-head builders sit below `training/` (whose minilm-squad recipe builds on them): no import circle."""
    core_imports = {
        name for name in imported_modules(ROOT / "qa_core/local_models/__init__.py") if name.startswith("qa_core.")
    }
    assert not {name for name in core_imports if name.startswith("qa_core.training")}, sorted(core_imports)
    assert "qa_core.local_models" in imported_modules(ROOT / "qa_core/training/minilm_squad.py")


def test_the_scan_sees_lazy_and_nested_imports() -> None:
    """The checks above can fail: the scan finds the driver's imports, the reader's lazy torch import included."""
    assert "jobs.bulk_qa.waves" in imported_modules(ROOT / "jobs/bulk_qa/driver.py")
    assert {"ray", "torch", "qa_core.reader"} <= imported_modules(ROOT / "jobs/bulk_qa/workers/read.py")
    assert "jobs.storage" in imported_modules(ROOT / "jobs/indexing/bm25.py")


def import_graph() -> dict[str, set[str]]:
    """Each module of `qa_core` and `jobs` -> the modules of both it imports (`from package import module` too)."""
    names = {module_name(path): path for folder in ("qa_core", "jobs") for path in modules(folder)}
    graph = {}
    for name, path in names.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
                imported.add(node.module)  # the package, or the module the names come from
        graph[name] = {module for module in imported if module in names} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that each reach every other by imports (strongly connected components)."""
    reach = {name: set() for name in graph}
    for start in graph:
        todo = list(graph[start])
        while todo:
            module = todo.pop()
            if module not in reach[start]:
                reach[start].add(module)
                todo.extend(graph[module])
    groups = {frozenset({name} | {other for other in reach[name] if name in reach[other]}) for name in graph}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def test_no_import_circle() -> None:
    """A module that reaches back to itself through imports (as a lazy import can hide) is one layer, not two."""
    assert circles(import_graph()) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail


def beside_the_bulk_job() -> list[Path]:
    """The index command and the benchmarks."""
    return [ROOT / "jobs/index.py", *modules("jobs/bench")]


@pytest.mark.parametrize("path", beside_the_bulk_job(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_index_command_and_the_benchmarks_import_nothing_of_the_bulk_job(path: Path) -> None:
    """They build and search indexes through `jobs.indexing` and `jobs.retrieval`, never through `jobs.bulk_qa`."""
    offending = {name for name in imported_modules(path) if name.startswith("jobs.bulk_qa")}
    assert not offending, f"{path.relative_to(ROOT)} imports {sorted(offending)}"
