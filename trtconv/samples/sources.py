"""Sample data for calibration, accuracy reports and verification: one loader, one set of checks.

Bad calibration data is the commonest way to get a quietly wrong INT8 engine, so every
sample is checked against the model's inputs (names, dtype, rank, fixed dims, NaN/Inf)
and a failure names the file. Samples keep their own shapes: dynamic H/W or sequence
lengths are never cropped or padded, because that would calibrate on data the model
never sees. Files are read lazily, one sample at a time, so a data set larger than
memory streams.

Every source kind (files, many-sample .npz, loader, random) shares the one set of checks of
:mod:`trtconv.samples.sample_checks`; image preprocessing lives in :mod:`trtconv.samples.images`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import logging
import math
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from trtconv.errors import DataError, UsageError
from trtconv.load import Shape
from trtconv.samples.images import IMAGE_SUFFIXES, ImagePreprocess, load_image
from trtconv.samples.random_samples import random_samples
from trtconv.samples.sample_checks import InputSpec, Sample, check_sample, model_inputs, read_npy_sample

log = logging.getLogger(__name__)

__all__ = ["GROUP_KEY", "ArraySamples", "ImagePreprocess", "InputSpec", "SampleSet", "SampleSource", "check_sample",
           "count_samples", "dataset_hash", "sample_groups", "iter_samples", "iter_samples_with_origin", "load_image", "model_inputs", "sample_count"]

ARRAY_SUFFIXES = (".npy", ".npz")
GROUP_KEY = "trtconv_group"  # an .npz key naming the source a sample comes from (kept together by a split)
RANDOM_WARNING = (
    "calibrating on RANDOM data: INT8 scales will not match real inputs and accuracy will suffer; "
    "use it only to smoke-test a pipeline"
)


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class SampleSource:
    """Where samples come from.

    - ``npy``: a folder of ``.npy``/``.npz`` files (or one file); one file = one sample; npz keys
      are input names, a bare ``.npy`` serves a single-input model.
    - ``images``: a folder of images, turned into tensors by ``preprocess``.
    - ``loader``: a Python file defining ``samples(inputs)`` (or ``samples()``) that yields dicts
      of input name → array. Runs user code, so only on an explicit flag.
    - ``random``: seeded normal noise; only on an explicit flag, with a loud warning.

    ``sources``: what a folder of files is (:func:`sample_groups`): ``folders``, one source (a page's lines, a
    speaker's clips: alike, so they count as one where they agree), or ``files``, independent draws that only
    share a folder (class folders of unrelated images).
    ``limit`` caps the number of samples (0 = all); ``shapes`` gives concrete dims of dynamic
    inputs for ``random``, ``limits`` and ``lengths`` what its integers may be (the rows of the table an input
    indexes; the sequences an input gives lengths of: :func:`~trtconv.onnxutil.integer_values`).
    """

    kind: Literal["npy", "images", "loader", "random"]
    path: Path | None = None
    preprocess: ImagePreprocess | None = None
    limit: int = 0
    seed: int = 0
    shapes: tuple[tuple[str, Shape], ...] = ()
    limits: tuple[tuple[str, int], ...] = ()
    lengths: tuple[tuple[str, str], ...] = ()
    sources: Literal["folders", "files"] = "folders"

    @classmethod
    def detect(cls, path: str | Path, preprocess: ImagePreprocess | None = None, *, limit: int = 0,
               sources: Literal["folders", "files"] = "folders") -> SampleSource:
        """``npy`` or ``images`` from what the folder holds (loader/random need explicit construction)."""
        p = Path(path)
        if not p.exists():
            raise DataError(f"{p}: no such file or folder", hint="give a folder of .npy/.npz files or images")
        if p.is_file():
            if p.suffix.lower() in ARRAY_SUFFIXES:
                return cls("npy", p, limit=limit)
            if p.suffix.lower() in IMAGE_SUFFIXES:
                return cls("images", p, preprocess or ImagePreprocess(), limit=limit)
            if p.suffix == ".py":
                raise UsageError(f"{p} is Python code", hint="pass it as a loader with --calib-loader")
            raise DataError(f"{p}: not a .npy/.npz file or an image")
        found = [f.suffix.lower() for f in p.rglob("*") if f.is_file()]
        suffixes = set(found)
        n_arrays = sum(1 for x in found if x in ARRAY_SUFFIXES)
        n_images = sum(1 for x in found if x in IMAGE_SUFFIXES)
        if n_arrays and n_images:
            raise DataError(
                f"{p}: the folder mixes {n_arrays} array file(s) (.npy/.npz) and {n_images} image(s); "
                "trtconv cannot tell which are the samples",
                hint="put the images and the arrays in separate folders and pass the one you mean",
            )
        if suffixes & set(ARRAY_SUFFIXES):
            return cls("npy", p, limit=limit, sources=sources)
        if suffixes & set(IMAGE_SUFFIXES):
            return cls("images", p, preprocess or ImagePreprocess(), limit=limit, sources=sources)
        raise DataError(
            f"{p}: no samples found (no .npy/.npz files and no images)",
            hint="put one .npy/.npz per sample, or images, in the folder",
        )

    @classmethod
    def random(cls, count: int, *, seed: int = 0, shapes: Mapping[str, Shape] | None = None,
               limits: Mapping[str, int] | None = None, lengths: Mapping[str, str] | None = None) -> SampleSource:
        return cls("random", None, limit=count, seed=seed, shapes=tuple(sorted((shapes or {}).items())),
                   limits=tuple(sorted((limits or {}).items())), lengths=tuple(sorted((lengths or {}).items())))

    @classmethod
    def loader(cls, path: str | Path, *, limit: int = 0) -> SampleSource:
        return cls("loader", Path(path), limit=limit)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path) if self.path else None,
            "preprocess": self.preprocess.to_json() if self.preprocess else None,
            "limit": self.limit,
            "seed": self.seed,
            "sources": self.sources,
        }


def _files(source: SampleSource, *, limit: bool = True) -> list[Path]:
    assert source.path is not None
    suffixes = ARRAY_SUFFIXES if source.kind == "npy" else IMAGE_SUFFIXES
    if source.path.is_file():
        files = [source.path]
    elif source.path.is_dir():
        files = sorted(f for f in source.path.rglob("*") if f.is_file() and f.suffix.lower() in suffixes)
    else:
        raise DataError(f"{source.path}: no such file or folder")
    if not files:
        kinds = "/".join(suffixes)
        raise DataError(f"{source.path}: folder holds no sample files ({kinds})", hint="add samples or fix the path")
    return files[: source.limit] if source.limit and limit else files


SampleRef = tuple[Path, str | None]  # a file, and the group inside an .npz that holds many samples


def _npz_groups(path: Path) -> list[str] | None:
    """The sample groups of an .npz holding many samples (``000/images``, ``001/images``, ...); None: one sample."""
    try:
        with zipfile.ZipFile(path) as zf:
            keys = [n[: -len(".npy")] if n.endswith(".npy") else n for n in zf.namelist()]
    except (zipfile.BadZipFile, OSError):
        return None  # np.load reports it, naming the file
    grouped = [k for k in keys if "/" in k]
    if not grouped:
        return None
    plain = [k for k in keys if "/" not in k]
    if plain:
        raise DataError(
            f"{path}: mixes grouped keys ({grouped[0]!r}) and plain keys ({plain[0]!r})",
            hint="one sample: keys are input names (images=...); many samples: every key is "
                 "NNN/<input name> (000/images, 001/images, ...)",
        )
    return sorted({k.rsplit("/", 1)[0] for k in grouped})


def _refs(source: SampleSource) -> list[SampleRef]:
    """Every sample of a file source in order: one per file, or one per group of a many-sample .npz."""
    refs: list[SampleRef] = []
    for f in _files(source, limit=False):
        groups = _npz_groups(f) if source.kind == "npy" and f.suffix.lower() == ".npz" else None
        refs += [(f, g) for g in groups] if groups else [(f, None)]
        if source.limit and len(refs) >= source.limit:
            break
    return refs[: source.limit] if source.limit else refs


def _origin(ref: SampleRef) -> str:
    return str(ref[0]) if ref[1] is None else f"{ref[0]}[{ref[1]}]"


def count_samples(source: SampleSource) -> int:
    """How many samples the source yields (a loader is run once to count, unless it defines ``__len__``)."""
    if source.kind in ("npy", "images"):
        return len(_refs(source))
    if source.kind == "random":
        return source.limit
    n = sum(1 for _ in _loader_iter(source, {}))
    return min(n, source.limit) if source.limit else n


def _loader_module(path: Path) -> Any:
    if not path.is_file():
        raise DataError(f"{path}: loader file not found")
    spec = importlib.util.spec_from_file_location(f"trtconv_user_loader_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise DataError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise DataError(f"{path}: loader failed to import ({type(exc).__name__}: {exc})") from exc
    fn = getattr(module, "samples", None)
    if not callable(fn):
        raise DataError(f"{path}: loader defines no samples() function",
                        hint="define samples(inputs) that yields dicts of input name -> numpy array")
    return fn


def _loader_iter(source: SampleSource, inputs: Mapping[str, InputSpec]) -> Iterator[tuple[str, Any]]:
    assert source.path is not None
    fn = _loader_module(source.path)

    try:
        takes_arg = bool(inspect.signature(fn).parameters)
        it = fn({k: {"dtype": v.dtype.name, "dims": list(v.dims)} for k, v in inputs.items()}) if takes_arg else fn()
        for i, sample in enumerate(it):
            yield f"{source.path} (sample {i})", sample
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{source.path}: loader raised {type(exc).__name__}: {exc}") from exc


def iter_samples(
    source: SampleSource, inputs: Mapping[str, InputSpec], *, start: int = 0, stop: int | None = None,
    picks: tuple[int, ...] | None = None,
) -> Iterator[Sample]:
    """Checked samples ``[start, stop)`` of ``source`` (or the samples at ``picks``, in source order), one at a time."""
    for _, sample in iter_samples_with_origin(source, inputs, start=start, stop=stop, picks=picks):
        yield sample


def iter_samples_with_origin(
    source: SampleSource, inputs: Mapping[str, InputSpec], *, start: int = 0, stop: int | None = None,
    picks: tuple[int, ...] | None = None,
) -> Iterator[tuple[str, Sample]]:
    """Like :func:`iter_samples`, with where each sample came from (file name, loader index),
    so a later failure on a sample can name it."""
    if picks is not None and source.kind in ("npy", "images"):
        refs = _refs(source)
        yield from _iter_refs(source, inputs, [refs[i] for i in sorted(set(picks)) if i < len(refs)])
        return
    if picks is not None:
        wanted = set(picks)
        last = max(picks, default=-1)
        for i, (origin, sample) in enumerate(iter_samples_with_origin(source, inputs)):
            if i > last:
                return
            if i in wanted:
                yield origin, sample
        return
    if source.kind == "random":
        warnings.warn(RANDOM_WARNING, UserWarning, stacklevel=3)
        log.warning(RANDOM_WARNING)
    noted: set[tuple[str, ...]] = set()
    if source.kind in ("npy", "images"):
        yield from _iter_refs(source, inputs, _refs(source)[start:stop])
        return
    it = _loader_iter(source, inputs) if source.kind == "loader" else random_samples(source, inputs)
    n = 0
    for i, (origin, sample) in enumerate(it):
        if source.limit and i >= source.limit:
            break
        if stop is not None and i >= stop:
            break
        n += 1
        if i >= start:
            yield origin, check_sample(sample, inputs, origin, noted=noted)
    if n == 0 and start == 0 and source.kind == "loader":
        raise DataError(f"{source.path}: loader yielded no samples", hint="samples() must yield at least one dict")


def _iter_refs(source: SampleSource, inputs: Mapping[str, InputSpec], refs: list[SampleRef]
               ) -> Iterator[tuple[str, Sample]]:
    noted: set[tuple[str, ...]] = set()
    for ref in refs:
        f, origin = ref[0], _origin(ref)
        if source.kind == "npy":
            raw = read_npy_sample(f, inputs, ref[1])
            raw.pop(GROUP_KEY, None)
        else:
            if len(inputs) != 1:
                raise DataError(f"{f}: image samples need a single-input model; this one has {len(inputs)}",
                                hint="give .npz samples with one key per input")
            name, spec = next(iter(inputs.items()))
            raw = {name: load_image(f, source.preprocess or ImagePreprocess(), spec)}
        yield origin, check_sample(raw, inputs, origin, noted=noted)


def sample_groups(source: SampleSource) -> list[str]:
    """Which source each sample comes from, in sample order: samples of one group stay in one part of a split.

    Files in more than one folder: the folder (relative to the data set) is the group, unless the source says its
    files are independent draws (``sources="files"``: class folders); all in one folder: each file is its own
    group. An ``.npz`` key ``trtconv_group`` (``NNN/trtconv_group`` in a many-sample .npz; any
    scalar) names the group instead. A loader's or random samples: each its own.
    """
    if source.kind not in ("npy", "images"):
        return [f"#{i}" for i in range(count_samples(source))]
    refs = _refs(source)
    assert source.path is not None
    base = source.path if source.path.is_dir() else source.path.parent
    by_folder = source.sources == "folders" and len({f.parent for f, _ in refs}) > 1
    out = []
    for f, group in refs:
        label = str(f.parent.relative_to(base)) if by_folder else _origin((f, group))
        if group is not None:
            label = _origin((f, group))
        if source.kind == "npy" and f.suffix.lower() == ".npz":
            key = _npz_group_key(f, group)
            label = f"key {key}" if key is not None else label
        out.append(label)
    return out


def _npz_group_key(path: Path, group: str | None) -> str | None:
    name = GROUP_KEY if group is None else f"{group}/{GROUP_KEY}"
    try:
        with np.load(path, allow_pickle=False) as z:
            if name not in z.files:
                return None
            value = np.asarray(z[name])
    except Exception:
        return None  # reading the sample itself reports a broken file, naming it
    return str(value.reshape(-1)[0].item()) if value.size else ""


def dataset_hash(source: SampleSource, *, start: int = 0, stop: int | None = None,
                 picks: tuple[int, ...] | None = None) -> str:
    """A stable hash of the data the source yields, without decoding it (for calibration cache keys).

    Files: names relative to the folder plus their bytes; images: plus the preprocessing;
    loader: the loader's source code (what it reads is out of sight: pass --no-cache
    when its data changes); random: seed, count and shapes.
    """
    h = hashlib.sha256()
    h.update(json.dumps({"kind": source.kind, "start": start, "stop": stop, **({"picks": list(picks)} if picks else {}),
                         "pp": source.preprocess.to_json() if source.preprocess else None},
                        sort_keys=True).encode())
    if source.kind in ("npy", "images"):
        assert source.path is not None
        base = source.path if source.path.is_dir() else source.path.parent
        digests: dict[Path, bytes] = {}
        refs = _refs(source)
        for f, group in (refs[start:stop] if picks is None else [refs[i] for i in sorted(set(picks)) if i < len(refs)]):
            if f not in digests:
                digests[f] = hashlib.sha256(f.read_bytes()).digest()
            h.update(f"{f.relative_to(base)}|{group or ''}".encode())
            h.update(digests[f])
    elif source.kind == "loader":
        assert source.path is not None
        h.update(source.path.read_bytes())
        h.update(str(source.limit).encode())
    else:
        h.update(json.dumps([source.seed, source.limit, [list(s) for s in source.shapes]]).encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- sample sets


@dataclass(frozen=True)
class SampleSet:
    """A re-iterable slice of a source bound to a model's inputs: what calibration and accuracy consume.

    ``picks``: the indices of the samples it holds (a random split's part); else ``[start, stop)``.
    """

    source: SampleSource
    inputs: Mapping[str, InputSpec] = field(hash=False, compare=False)
    start: int = 0
    stop: int | None = None
    picks: tuple[int, ...] | None = None

    def __iter__(self) -> Iterator[Sample]:
        return iter_samples(self.source, self.inputs, start=self.start, stop=self.stop, picks=self.picks)

    def with_origin(self) -> Iterator[tuple[str, Sample]]:
        return iter_samples_with_origin(self.source, self.inputs, start=self.start, stop=self.stop, picks=self.picks)

    def __len__(self) -> int:
        if self.picks is not None:
            return len(self.picks)
        total = count_samples(self.source)
        stop = total if self.stop is None else min(self.stop, total)
        return max(0, stop - self.start)

    def digest(self) -> str:
        return dataset_hash(self.source, start=self.start, stop=self.stop, picks=self.picks)

    def indices(self) -> list[int]:
        """The source positions of the samples it holds."""
        if self.picks is not None:
            return list(self.picks)
        return list(range(self.start, self.start + len(self)))

    def groups(self) -> list[str]:
        """The group (source) of each sample it holds (:func:`sample_groups`)."""
        every = sample_groups(self.source)
        return [every[i] for i in self.indices()]

    def subset(self, picks: list[int] | tuple[int, ...]) -> SampleSet:
        """The samples at these source positions (sorted: samples stream in source order)."""
        return replace(self, start=0, stop=None, picks=tuple(sorted(picks)))

    def split(self, holdout: int | float) -> tuple[SampleSet, SampleSet]:
        """(calibration, held-out): the last ``holdout`` samples (a count, or a fraction < 1) are held out."""
        n = len(self)
        k = int(math.ceil(n * holdout)) if isinstance(holdout, float) and holdout < 1 else int(holdout)
        if k <= 0 or k >= n:
            raise UsageError(f"cannot hold out {k} of {n} samples", hint="need at least one sample on each side")
        idx = self.indices()
        return self.subset(idx[: n - k]), self.subset(idx[n - k:])


@dataclass(frozen=True)
class ArraySamples:
    """Samples already in memory (library use and tests): a sequence of input dicts."""

    samples: tuple[Mapping[str, np.ndarray], ...]
    inputs: Mapping[str, InputSpec] | None = field(default=None, hash=False, compare=False)
    origin: str = "sample"

    def __iter__(self) -> Iterator[Sample]:
        noted: set[tuple[str, ...]] = set()
        for i, s in enumerate(self.samples):
            if self.inputs is None:
                yield {k: np.asarray(v) for k, v in s.items()}
            else:
                yield check_sample(s, self.inputs, f"{self.origin} {i}", noted=noted)

    def with_origin(self) -> Iterator[tuple[str, Sample]]:
        for i, s in enumerate(self):
            yield f"{self.origin} {i}", s

    def __len__(self) -> int:
        return len(self.samples)

    def digest(self) -> str:
        h = hashlib.sha256()
        for s in self.samples:
            for k in sorted(s):
                a = np.ascontiguousarray(np.asarray(s[k]))
                h.update(f"{k}|{a.dtype.str}|{a.shape}".encode())
                h.update(a.tobytes())
        return h.hexdigest()


Samples = SampleSet | ArraySamples
ProgressFn = Callable[[int, int | None], None]


def sample_count(samples: Any) -> int | None:
    """len(samples) when it is cheap and safe (never for a user loader: counting would run its code)."""
    source = getattr(samples, "source", None)
    if source is not None and getattr(source, "kind", None) == "loader":
        return None
    try:
        return len(samples)
    except TypeError:
        return None
