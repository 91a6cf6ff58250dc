"""
The layers the tree promises: `qa_core` imports neither Ray nor `jobs`; the bulk job's worker side imports only
`qa_core` and itself, never its driver side. Read from the source, so that a lazy import counts too.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
    driver_side = {name for name in jobs_imports if not name.startswith("jobs.bulk_qa.workers")}
    assert not driver_side, f"{path.relative_to(ROOT)} imports {sorted(driver_side)}"


@pytest.mark.parametrize("path", modules("qa_core"), ids=lambda path: str(path.relative_to(ROOT)))
def test_qa_core_imports_no_haystack(path: Path) -> None:
    """Haystack is the parity suite's reference (a test dependency), never the core's."""
    offending = {name for name in imported_modules(path) if name.split(".")[0] == "haystack"}
    assert not offending, f"{path.relative_to(ROOT)} imports {sorted(offending)}"


def test_ingest_stage_imports_nothing_of_the_driver_side() -> None:
    """
    What runs in Ray's workers for jobs.ingest (stage.py) imports `qa_core` and the bulk job's worker side (its
    filesystems), never a driver: the CLI, the ingestion run, the bulk job's driver side.
    """
    jobs_imports = {name for name in imported_modules(ROOT / "jobs/ingest/stage.py") if name.split(".")[0] == "jobs"}
    driver_side = {name for name in jobs_imports if not name.startswith("jobs.bulk_qa.workers")}
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
