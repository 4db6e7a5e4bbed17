"""The DCNv2 kernels build, and the PTX trtconv ships is what plugins/dcnv2/*.cu compile to.

Runs in the normal suite (CI has nvcc, CUDA 13.0): a kernel that does not compile, or PTX
that was not regenerated after an edit (`make dcnv2-ptx`), fails here. dcnv2.ptx targets
compute_80 (the driver compiles it for the GPU it runs on), dcnv2_sm90a.ptx compute_90a
(wgmma, Hopper only); ptxas checks that what an engine embeds (one entry per plugin)
assembles for Hopper with static shared memory only (48 KiB for sm_90, 227 KiB for sm_90a).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from scripts import load_script

from trtconv.trt.plugins import dcnv2_kernel as dk


def _build_module():
    return load_script("plugins/dcnv2/build_ptx.py", "dcnv2_build_ptx")


@pytest.fixture(scope="module")
def build():
    mod = _build_module()
    try:
        mod.nvcc()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return mod


@pytest.fixture(scope="module")
def fresh_ptx(build, tmp_path_factory) -> dict[str, str]:
    """Both shipped architectures compiled from source at once (two nvcc processes side by side: each
    one runs on one core, and the pair is most of this file's time)."""
    folder = tmp_path_factory.mktemp("ptx")
    archs = (dk.PTX_ARCH, dk.SM90_PTX_ARCH)
    with ThreadPoolExecutor(len(archs)) as pool:
        list(pool.map(lambda arch: build.compile_ptx(arch, folder / f"{arch}.ptx"), archs))
    return {arch: (folder / f"{arch}.ptx").read_text() for arch in archs}


@pytest.mark.parametrize("arch", [dk.PTX_ARCH, dk.SM90_PTX_ARCH])
def test_shipped_ptx_matches_source(build, fresh_ptx, arch):
    shipped_file = build.TARGETS[arch][1]
    fresh = build.ptx_body(fresh_ptx[arch])
    shipped = build.ptx_body(shipped_file.read_text())
    assert fresh == shipped, f"trtconv/trt/plugins/{shipped_file.name} is stale: run `make dcnv2-ptx`"


@pytest.mark.parametrize(
    "dtype,tile,tf32,layout",
    [
        ("float16", dk.TILES[0], True, "nhwc"),
        ("float32", dk.TILES[-1], False, "nchw"),
        ("float32", dk.SM90_TILES[4], True, "nhwc"),  # 128 x 128 wx4: four passes' loads at once
        ("float32", dk.SM90_TILES[3], True, "nhwc"),  # an entry with shared memory of its own (_XS)
    ],
)
def test_embedded_entry_assembles_for_hopper(build, tmp_path, dtype, tile, tf32, layout):
    """The single-entry module the plugin hands TensorRT is complete PTX for sm_90(a)."""
    ptxas = shutil.which("ptxas") or str(Path(build.nvcc()).with_name("ptxas"))
    name = dk.kernel_name(dtype, tile, tf32, layout)
    src = tmp_path / f"{name}.ptx"
    src.write_text(dk.entry_ptx(name))
    arch = "sm_90a" if tile in dk.SM90_TILES else "sm_90"
    res = subprocess.run(
        [ptxas, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    used = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", res.stderr, re.S)
    assert used, res.stderr
    # Static shared memory only (TensorRT launches with no dynamic shared memory and no opt-in):
    # at most 48 KiB for sm_90, and up to the 227 KiB a Hopper block can have for sm_90a, which
    # ptxas 13 accepts as static (checked on an H200: such entries launch with no attribute set).
    limit = 227 * 1024 if arch == "sm_90a" else 48 * 1024
    assert int(used.group(2)) <= limit, f"static shared memory {used.group(2)} bytes over {limit}"
    assert "spill" not in res.stderr or " 0 bytes spill stores" in res.stderr, res.stderr


def test_every_entry_is_shipped():
    names = set(re.findall(r"^\.visible \.entry (\w+)\(", dk.load_ptx(), re.M))
    wanted = {
        dk.kernel_name(d, t, tf, lay) for d in dk.DTYPES for t in dk.TILES for tf in (True, False) for lay in dk.LAYOUTS
    }
    assert wanted <= names, f"missing entries: {sorted(wanted - names)[:5]}"
    one = dk.entry_ptx(dk.kernel_name("float16", dk.TILES[0]))
    assert one.count(".entry ") == 1 and one.startswith(".version") and ".target sm_80" in one
    hopper = set(re.findall(r"^\.visible \.entry (\w+)\(", dk.load_ptx(dk.SM90_PTX_FILE), re.M))
    wanted = {dk.kernel_name(d, t, True, lay) for d in dk.DTYPES for t in dk.SM90_TILES for lay in dk.LAYOUTS}
    assert wanted == hopper, f"compute_90a entries differ: {sorted(wanted ^ hopper)[:5]}"
    one = dk.entry_ptx(dk.kernel_name("bfloat16", dk.SM90_TILES[0], layout="nhwc"))
    assert one.count(".entry ") == 1 and ".target sm_90a" in one
    with pytest.raises(ValueError, match="FP32-accurate"):
        dk.kernel_name("float32", dk.SM90_TILES[0], allow_tf32=False)


def test_single_entry_cuts_one_entry_from_any_build():
    """plugins/dcnv2/devvar.py runs entries of other builds of the PTX through the same cut
    the plugin uses for the shipped one."""
    name = dk.kernel_name("float16", dk.SM90_TILES[2], layout="nhwc")
    text = dk.load_ptx(dk.SM90_PTX_FILE)
    one = dk.single_entry(text, name)
    assert one == dk.entry_ptx(name) and one.count(".entry ") == 1
    with pytest.raises(ValueError, match="a dev build has no entry point dcnv2_missing"):
        dk.single_entry(text, "dcnv2_missing", "a dev build")


def test_split_k_entries_declare_their_cluster():
    """A split-K entry's CTAs must form clusters of exactly the size its launch grid assumes
    (dk.grid multiplies the pixel tiles by dk.split_k); every other entry has no cluster."""
    for tile in dk.SM90_TILES:
        for dtype in dk.DTYPES:
            for layout in dk.LAYOUTS:
                text = dk.entry_ptx(dk.kernel_name(dtype, tile, True, layout))
                found = re.search(r"^\.reqnctapercluster (\d+), 1, 1$", text, re.M)
                assert (int(found.group(1)) if found else 1) == dk.split_k(tile), (tile, dtype, layout)


def _undeclared_shared(text: str) -> set[str]:
    """Shared-memory symbols a PTX module uses but does not declare."""
    used = set(re.findall(r"\bmov\.u32\s+%r\d+,\s*(_Z\w+);", text))
    declared = set(re.findall(r"^\s*\.shared\s+\.align\s+\d+\s+\.b8\s+(\w+)\[", text, re.M))
    return used - declared


def test_single_entries_declare_their_shared_memory():
    """The plugin hands TensorRT one entry cut from the PTX: each must declare the shared memory
    it uses. nvcc declares a shared array once per template instantiation, so two entries built
    on one instantiation would leave the second one's cut unassemblable."""
    for tile in dk.SM90_TILES:
        for dtype in dk.DTYPES:
            for layout in dk.LAYOUTS:
                name = dk.kernel_name(dtype, tile, True, layout)
                assert not _undeclared_shared(dk.entry_ptx(name)), name
