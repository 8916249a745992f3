"""The package boundaries, kept by a machine: pure drift/, SQL in baselines/, Kafka in streams/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ALLOWED = {
    "drift": {"drift", "numpy", "scipy"},
    "baselines": {"baselines", "drift", "duckdb", "msgspec", "pyarrow"},
}
KAFKA_OR_WEB = {"faust", "aiokafka", "kafka", "aiohttp", "prometheus_client", "mode"}
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|WITH|ATTACH|COPY|CHECKPOINT)\b")
STDLIB_IO = {"socket", "subprocess", "urllib", "http", "asyncio", "requests", "sqlite3", "random"}
#: The modules a worker runs: none of them may load the report's or the demo's code (only the
#: CLI, which starts either, imports them), nor the oracle the tests and benchmarks hold the
#: worker against.
WORKER_MODULES = ("worker", "processing.engine", "processing.records", "processing.meter",
                  "processing.memory", "processing.rebuild", "processing.carry_out",
                  "kafka.publish", "kafka.broker_watch",
                  "kafka.changelog", "kafka.checkpoints", "kafka.producers", "kafka.owners",
                  "kafka.batches", "edge.codec", "edge.fhr_schema", "edge.rejection", "edge.tick",
                  "edge.wire", "edge.formats", "http", "metrics", "supervise", "settings", "topics",
                  "broker")
FRONTS = ("streams.report", "streams.demo", "streams.oracle")
#: What the kernel may import beyond drift/'s own: numba and its code generator (llvmlite
#: comes with it; the kernel names SciPy's C functions to it by symbol).
KERNEL = {"numba", "llvmlite"}
#: The modules of drift/ that may import msgspec, for its frozen Structs only (the values
#: built for every record, docs/design.md): never its codecs, drift/ sees no bytes.
STRUCTS = {"model.py", "evolve.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _modules(path: Path) -> set[str]:
    """Every module ``path`` imports, by its full dotted name (``from a import b`` gives
    both ``a`` and ``a.b``, since ``b`` may be a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _stdlib() -> set[str]:
    import sys
    return set(sys.stdlib_module_names)


def test_drift_is_pure() -> None:
    stdlib = _stdlib() - STDLIB_IO
    for path in (ROOT / "drift").rglob("*.py"):
        allowed = ALLOWED["drift"] | (KERNEL if path.parent.name == "kernel" else set())
        if path.parent.name == "drift" and path.name in STRUCTS:
            allowed |= {"msgspec"}
            assert _modules(path) & {"msgspec.json", "msgspec.msgpack"} == set(), path
        bad = {m for m in _imports(path) if m not in stdlib and m not in allowed}
        bad |= _imports(path) & STDLIB_IO
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
        text = path.read_text()
        for clock in ("time.time(", "datetime.now(", "np.random.seed(", "random.seed("):
            assert clock not in text, f"{path.relative_to(ROOT)} reads a clock or global seed"


def test_numba_is_the_kernels_alone_and_the_reference_never_imports_the_kernel() -> None:
    for path in (ROOT / "drift").rglob("*.py"):
        imports = _imports(path)
        in_kernel = path.parent == ROOT / "drift" / "kernel"
        if not in_kernel:
            assert not imports & KERNEL, f"{path.relative_to(ROOT)} imports numba"
            text = path.read_text()
            assert "drift.kernel" not in text, f"{path.relative_to(ROOT)} imports the kernel"
        else:
            assert imports <= {"numpy", "drift"} | KERNEL | _stdlib(), (
                f"{path.relative_to(ROOT)} imports {sorted(imports)}")


def test_baselines_imports_only_storage_and_drift() -> None:
    stdlib = _stdlib()
    for path in (ROOT / "baselines").rglob("*.py"):
        bad = {m for m in _imports(path) if m not in stdlib and m not in ALLOWED["baselines"]}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_sql_lives_only_in_baselines() -> None:
    for package in ("drift", "streams"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    assert not SQL.search(node.value), (
                        f"SQL in {path.relative_to(ROOT)}: {node.value[:60]!r}")
            assert "duckdb" not in _imports(path), f"{path.relative_to(ROOT)} imports duckdb"


def test_kafka_and_http_live_only_in_streams() -> None:
    for package in ("drift", "baselines"):
        for path in (ROOT / package).rglob("*.py"):
            bad = _imports(path) & KAFKA_OR_WEB
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def _module_path(name: str) -> Path | None:
    """The file of a module of this tree, or None for anything else (or a name in a module)."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def test_the_worker_never_loads_the_report_the_demo_or_the_oracle() -> None:
    """Followed through every module of the tree a worker module imports, at any depth."""
    for name in WORKER_MODULES:
        start = ROOT / "streams" / f"{name.replace('.', '/')}.py"
        seen, todo = {start}, [(start, (f"streams.{name}",))]
        while todo:
            path, chain = todo.pop()
            for module in _modules(path):
                assert not any(module == f or module.startswith(f + ".") for f in FRONTS), (
                    f"{' -> '.join(chain)} imports {module}")
                found = _module_path(module)
                if found is not None and found not in seen:
                    seen.add(found)
                    todo.append((found, (*chain, module)))


def test_the_global_metrics_registry_is_never_used() -> None:
    for path in (ROOT / "streams").rglob("*.py"):
        text = path.read_text()
        assert "REGISTRY" not in text.replace("CollectorRegistry", "")
        assert "start_http_server" not in text
