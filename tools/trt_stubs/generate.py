#!/usr/bin/env python3
"""Type stubs for ``tensorrt`` generated from NVIDIA's real Python bindings wheels.

TensorRT's native libraries are not on PyPI, but its bindings wheels are. The
bindings' ``tensorrt.so`` links a handful of C factory functions from
libnvinfer/libnvinfer_plugin/libnvonnxparser; we compile one tiny C library that
exports those names (all returning 0), so ``import tensorrt`` succeeds and mypy's
``stubgen --inspect-mode`` can introspect the module. Nothing here ever *calls* into
the stubbed module: a factory would return NULL.

TensorRT-RTX ("rtx") is handled the same way: its bindings wheel's package is
``tensorrt_rtx_bindings`` (extension ``tensorrt_rtx.so``, libraries ``libtensorrt_rtx.so.1``
and ``libtensorrt_onnxparser_rtx.so.1``). Its stubs are written as a package named
``tensorrt``, because trtconv's adapter imports every flavour's module under that name for
the type checker (``trtconv/trt/loader.py``): the same code is checked against each API.

Usage: ``python tools/trt_stubs/generate.py [--out .cache/trt-stubs] [--version 11.4 ...]``.
Writes ``<out>/<version>/tensorrt/*.pyi``; re-running with the same wheels and mypy
is a no-op (a stamp file records both).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# short version -> (PyPI distribution, exact version, library major)
WHEELS: dict[str, tuple[str, str, str]] = {
    "10.16": ("tensorrt-cu12-bindings", "10.16.1.11", "10"),
    "11.4": ("tensorrt-cu13-bindings", "11.4.0.106", "11"),
    "rtx": ("tensorrt-rtx-cu13-bindings", "1.7.1.116", "1"),
}
NATIVE_LIBS = ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser")
# What differs per flavour: the wheel's package, its extension module, the native libraries it links.
PACKAGE = {"rtx": "tensorrt_rtx_bindings"}
EXTENSION = {"rtx": "tensorrt_rtx"}
LIBS = {"rtx": ("libtensorrt_rtx", "libtensorrt_onnxparser_rtx")}
# The C names the bindings link from the native libraries (nm -D --undefined-only).
# Used when nm is unavailable; otherwise nm's list is used and must be covered by this pattern.
KNOWN_SYMBOLS = (
    "createInferBuilder_INTERNAL",
    "createInferRefitter_INTERNAL",
    "createInferRuntime_INTERNAL",
    "createNvOnnxParser_INTERNAL",
    "createNvOnnxParserRefitter_INTERNAL",
    "getBuilderPluginRegistry",
    "getNvOnnxParserVersion",
    "getPluginRegistry",
    "initLibNvInferPlugins",
)
NATIVE_SYMBOL = re.compile(r"^(create(Infer|NvOnnx)\w*|get\w*(Registry|Version)|initLibNvInfer\w*)$")


def log(msg: str) -> None:
    print(f"trt-stubs: {msg}", file=sys.stderr, flush=True)


def download(dist: str, version: str, dest: Path) -> Path:
    pattern = dist.replace("-", "_") + f"-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        log(f"downloading {dist}=={version}")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             f"{dist}=={version}", "-d", str(dest)],
            check=True,
        )
        found = sorted(dest.glob(pattern))
    if not found:
        raise SystemExit(f"trt-stubs: no wheel {pattern} in {dest} after pip download")
    return found[0]


def undefined_native_symbols(so: Path) -> list[str]:
    if shutil.which("nm") is None:
        return list(KNOWN_SYMBOLS)
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True, check=True)
    names = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U" and "@" not in parts[-1] and NATIVE_SYMBOL.match(parts[-1]):
            names.append(parts[-1])
    missing = set(KNOWN_SYMBOLS) - set(names)
    if missing:  # the pattern must still see every name we know of
        log(f"note: nm did not list {sorted(missing)}; defining them anyway")
    return sorted(set(names) | set(KNOWN_SYMBOLS))


def build_native_stubs(symbols: list[str], major: str, libdir: Path, libs: tuple[str, ...] = NATIVE_LIBS) -> None:
    libdir.mkdir(parents=True, exist_ok=True)
    src = libdir / "trt_native_stub.c"
    src.write_text(
        "/* Generated: satisfies the dynamic linker only; every function returns 0/NULL. */\n"
        + "".join(f"void *{name}(void) {{ return 0; }}\n" for name in symbols)
    )
    for lib in libs:
        so = libdir / f"{lib}.so.{major}"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O0", "-o", str(so), f"-Wl,-soname,{so.name}", str(src)], check=True
        )


def fix_stub_syntax(text: str) -> tuple[str, int]:
    """stubgen writes a few signatures Python cannot parse (a default before a non-default
    parameter, e.g. ``add_scale_nd(..., power: Weights = ..., channel_axis: SupportsInt)``).
    Give the trailing parameters a default too: harmless for type-checking callers."""
    fixed = 0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("def ") or "= ..." not in stripped:
            continue
        try:
            ast.parse(stripped)
            continue
        except SyntaxError:
            pass
        m = re.match(r"^(\s*def \w+\()(.*)(\)\s*(->.*)?:\s*\.\.\.\s*)$", line)
        if not m:
            continue
        params = _split_params(m.group(2))
        seen_default = False
        for j, p in enumerate(params):
            if "=" in p:
                seen_default = True
            elif seen_default and not p.strip().startswith("*"):
                params[j] = p.rstrip() + " = ..."
        candidate = m.group(1) + ", ".join(q.strip() for q in params) + m.group(3)
        try:
            ast.parse(candidate.strip())
        except SyntaxError:
            continue
        lines[i] = candidate
        fixed += 1
    return "\n".join(lines) + "\n", fixed


def fix_builtin_shadowing(text: str) -> tuple[str, int]:
    """The bindings define a module attribute ``bool`` (``trt.bool``, a DataType), which
    shadows the builtin inside the stub: every ``-> bool`` would mean a DataType. Annotations
    get ``builtins.bool``; the attribute itself stays."""
    out, n = [], 0
    for line in text.splitlines():
        if re.match(r"^bool\s*:", line) or not re.search(r"\bbool\b", line):
            out.append(line)
            continue
        new = re.sub(r"(?<![.\w])bool\b", "builtins.bool", line)
        n += new != line
        out.append(new)
    if n:
        first_import = next(i for i, ln in enumerate(out) if ln.startswith(("import ", "from ")))
        out.insert(first_import, "import builtins")
    return "\n".join(out) + "\n", n


def rename_package(gen: Path, short: str) -> None:
    """Stubs of another package name (RTX's ``tensorrt_rtx_bindings``/``tensorrt_rtx``) → ``tensorrt``/
    ``tensorrt.tensorrt``, the names the adapter is type-checked under."""
    package, extension = PACKAGE.get(short, "tensorrt"), EXTENSION.get(short, "tensorrt")
    if package == "tensorrt":
        return
    src = gen / package
    for pyi in src.rglob("*.pyi"):
        text = pyi.read_text().replace(f"{package}.{extension}", "tensorrt.tensorrt").replace(package, "tensorrt")
        text = text.replace(f"from . import {extension} as {extension}", "from . import tensorrt as tensorrt")
        pyi.write_text(text)
    ext = src / f"{extension}.pyi"
    if ext.is_file():
        ext.rename(src / "tensorrt.pyi")
    src.rename(gen / "tensorrt")


def fix_reexports(init_text: str, module_text: str) -> tuple[str, int]:
    """``__init__.py`` leaks loop variables (``value``) that stubgen re-exports from
    ``tensorrt.tensorrt``, where they do not exist: drop names the module does not define."""
    tree = ast.parse(module_text)
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    out, n = [], 0
    for line in init_text.splitlines():
        m = re.match(r"^from tensorrt\.tensorrt import (.*)$", line)
        if m:
            names = [x.strip() for x in m.group(1).split(",")]
            keep = [x for x in names if x.split(" as ")[0].strip() in defined]
            n += len(names) - len(keep)
            line = "from tensorrt.tensorrt import " + ", ".join(keep)
        out.append(line)
    return "\n".join(out) + "\n", n


def _split_params(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def generate(short: str, out: Path, wheels_dir: Path) -> Path:
    dist, version, major = WHEELS[short]
    import mypy.version

    fixes = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    stamp_text = f"{dist}=={version} mypy=={mypy.version.__version__} python=={sys.version_info[:2]} gen={fixes}\n"
    target = out / short
    stamp = target / ".stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text and (target / "tensorrt" / "__init__.pyi").is_file():
        log(f"{short}: up to date ({target})")
        return target
    wheel = download(dist, version, wheels_dir)
    with tempfile.TemporaryDirectory(prefix="trt-stubs-") as tmp_name:
        tmp = Path(tmp_name)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp / "wheel")
        package = PACKAGE.get(short, "tensorrt")
        pkg = tmp / "wheel" / PACKAGE.get(short, "tensorrt_bindings")
        so = next(pkg.glob(f"{EXTENSION.get(short, 'tensorrt')}*.so"), None)
        if so is None:
            raise SystemExit(f"trt-stubs: {wheel.name} has no {EXTENSION.get(short, 'tensorrt')}*.so")
        build_native_stubs(undefined_native_symbols(so), major, tmp / "lib", LIBS.get(short, NATIVE_LIBS))
        (tmp / "py").mkdir()
        # TensorRT's wheel package is tensorrt_bindings, imported as tensorrt; RTX's keeps its own name.
        (tmp / "py" / package).symlink_to(pkg, target_is_directory=True)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(tmp / "lib"), env.get("LD_LIBRARY_PATH")]))
        env["PYTHONPATH"] = str(tmp / "py")
        gen = tmp / "stubs"
        log(f"{short}: stubgen --inspect-mode on {wheel.name}")
        subprocess.run(
            [sys.executable, "-c", "import sys; from mypy.stubgen import main; sys.argv[0] = 'stubgen'; main()",
             "-p", package, "--inspect-mode", "-o", str(gen)],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )
        rename_package(gen, short)
        total = 0
        for pyi in sorted(gen.rglob("*.pyi")):
            text, n = fix_stub_syntax(pyi.read_text())
            total += n
            try:
                ast.parse(text)
            except SyntaxError as exc:
                raise SystemExit(f"trt-stubs: {pyi.relative_to(gen)}:{exc.lineno}: still unparsable: {exc.msg}") from exc
            pyi.write_text(text)
        module_pyi = gen / "tensorrt" / "tensorrt.pyi"
        text, n = fix_builtin_shadowing(module_pyi.read_text())
        module_pyi.write_text(text)
        init_pyi = gen / "tensorrt" / "__init__.pyi"
        init_text, m = fix_reexports(init_pyi.read_text(), text)
        init_pyi.write_text(init_text)
        total += n + m
        staging = out / f".{short}.new"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copytree(gen / "tensorrt", staging / "tensorrt")
        (staging / ".stamp").write_text(stamp_text)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    log(f"{short}: wrote {target} ({total} stub line(s) repaired)")
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(".cache/trt-stubs"))
    ap.add_argument("--wheels", type=Path, default=None, help="wheel cache (default: <out>/wheels)")
    ap.add_argument("--version", dest="versions", action="append", choices=sorted(WHEELS))
    args = ap.parse_args(argv)
    for short in args.versions or sorted(WHEELS):
        generate(short, args.out, args.wheels or args.out / "wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
