"""Real sample sets for measuring the INT8 gate (benchmarks/int8_gate_truth.py): 60-150 samples per model, each
tagged with the source item it comes from (one subfolder per source), so that a split can keep a source whole.

Nothing is downloaded from a model hub and nothing large is committed: the sets are made on this machine into
``.cache/gate_data/MODEL/SOURCE/NNN.npz`` (ignored by git) from

- **text** on the machine: the license texts in ``/usr/share/common-licenses`` and the docstrings of a few
  standard-library modules. A *source* is one document typeset in one style (font, size, paper, ink, blur), as
  the lines of one scanned page are; its lines are consecutive runs of that document's words.
  ``cls`` (PP-OCR mobile v2 angle classifier): each line upright or turned 180 degrees (a coin per line), through
  rapidocr's own ``TextClassifier.resize_norm_img`` (3x48x192). ``rec`` (PP-OCRv4 recognizer): rapidocr's own
  ``TextRecognizer.resize_norm_img`` at its batch-of-one width (3x48x320; lines kept within that ratio).
  ``dddd`` (ddddocr's float CRNN ``common.onnx``): ddddocr's own preprocessing (LANCZOS to height 64, gray, /255),
  then padded on the right with the line's paper to width 256 (one shape, so that ModelOpt's calibrators can
  stack samples; lines kept within it).
- **photos** from scikit-image's wheel (``skimage/data``: astronaut, coffee, chelsea, rocket, the motorcycle
  stereo pair as one source, ...; the wheel is fetched with ``pip download`` and read as a zip, never installed):
  ``yolo`` (NudeNet 3.4's YOLOv8n ``320n.onnx``): per photo, seeded crops (40-100 % of each side) and mirror
  images, through NudeNet's own ``_read_image`` (pad to square, 320x320, /255, RGB).
- **speech** for ``silero16k`` (``silero_vad_16k_op15.onnx``): sentences of the same texts spoken by espeak-ng
  (``apt-get install espeak-ng``; voices, speeds and pitches vary per sentence), resampled to 16 kHz, and the
  recorded CMU ARCTIC sentence of tests/realdata.py; each at a source-chosen level and room-noise SNR, fed chunk
  by chunk with the state the FP32 model itself produces (tests/realdata.py ``silero_samples``); every 12th chunk
  kept. A source is one utterance.
- **files** for ``magika`` (Google's file-type classifier ``standard_v3_3``, magika 1.0.3's wheel; int32 byte
  features [N, 2048]): the files installed on this machine, each through magika's own feature extraction
  (``Magika._get_result_or_features_from_path``: whitespace stripped, the first and last 1024 bytes, padding
  token 256; files magika answers without its model, empty or a few bytes, are left out as magika leaves them).
  A *source* is the package that installed the file: a Debian package (dpkg's file lists) or a Python
  distribution (its ``RECORD``). A package's files share their authors, toolchain and conventions (one
  project's Python style, one library's ELF build flags, one documentation's changelog format), which is what
  makes two inputs alike; a file type would be a few dozen sources at most, and a directory mixes packages
  (``/usr/bin``). Without ``--sources``, 150 packages (``MAGIKA_SOURCES``), 1 file each (``--scale`` k: k), 1
  package in 5 gives one more; a file whose features another already gave (the same license text in two
  packages) is skipped.

    python benchmarks/gate_data.py [--models cls,rec,dddd,yolo,silero16k,magika] [--out .cache/gate_data] [--scale K] [--force]
    python benchmarks/gate_data.py --sources 300 [--models ...]   # into .cache/gate_data_s300

``--sources N`` makes the *many-source* sets instead (issue 32's Done-when: a pass needs 45 judged sources,
so a set must hold a few hundred), into ``.cache/gate_data_sN/``: for ``cls``, ``rec`` and ``dddd`` N sources,
each one distinct text line (1-2 lines: 1 in 5 sources gets the next line too) drawn from a pool of local
texts (``/usr/share/common-licenses``, the docstrings of the standard library, ``/usr/share/doc/*/copyright``)
and typeset in its own independently drawn style (any installed TrueType font, size, paper, ink, noise, blur);
for ``silero16k`` N utterances (a distinct sentence x espeak-ng voice and variant x speed x pitch x level x
noise), 1-2 chunks each at random places, with the FP32 model's own state; for ``yolo`` N photo sources (1 in 5
gets a second variant: a seeded crop of its next photo), scikit-image's 20 and the rest drawn from the real
photographs of a few Debian 12 packages (``PHOTO_DEBS``, ``GCOMPRIS``: 321 sources in all), each fetched once with
``apt-get download PACKAGE=VERSION`` into ``OUT/_packages`` and read from the .deb, never installed:
``opencv-doc`` (its sample data: 25 scenes; a stereo pair, an image and its edit, the chessboard calibration
session are one source each), ``lomiri-wallpapers-16.04`` and ``-20.04`` (13), ``mate-backgrounds`` (its 12
nature photos), ``lxqt-themes`` (6), ``plasma-workspace-wallpapers`` (9), and ``gcompris-qt-data`` (236: the
photographs of its categorization, erase, explore_monuments, explore_world_animals, explore_farm_animals,
explore_world_music and clickgame activities, read out of their Qt ``.rcc`` resource files); renders, drawings
and paintings are left out by name, and categorization's monuments because explore_monuments shows the same.

For ``magika``, ``--sources N`` is N packages drawn at random from those that have such a file (of 975 listed here).

``--scale 2`` doubles every set (240 text lines, 200 photo variants, 300 speech chunks): what the default INT8
command needs since it judges a pass on at least 45 samples of the data it is given (90 in the calibration half).

Each model folder gets ``meta.json``: the model file, the input, how the set was made, samples per source.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.append(str(ROOT / "tests"))  # appended: tests/triton must not shadow the triton package

DEFAULT_OUT = ROOT / ".cache" / "gate_data"
MODELS = ("cls", "rec", "dddd", "yolo", "silero16k", "magika")
LICENSES = ("Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1", "LGPL-3",
            "MPL-1.1", "MPL-2.0")
DOC_MODULES = ("argparse", "difflib", "heapq", "json", "pickle")
LINES_PER_SOURCE = 8
SKIMAGE_WHEEL = "scikit-image==0.26.0"
PHOTOS = {  # source -> files in skimage/data (one scene's stereo pair is one source)
    "astronaut": ("astronaut.png",), "brick": ("brick.png",), "camera": ("camera.png",), "cell": ("cell.png",),
    "chelsea": ("chelsea.png",), "clock": ("clock_motion.png",), "coffee": ("coffee.png",), "coins": ("coins.png",),
    "color": ("color.png",), "grass": ("grass.png",), "gravel": ("gravel.png",), "hubble": ("hubble_deep_field.jpg",),
    "ihc": ("ihc.png",), "logo": ("logo.png",), "moon": ("moon.png",),
    "motorcycle": ("motorcycle_left.png", "motorcycle_right.png"), "page": ("page.png",), "retina": ("retina.jpg",),
    "rocket": ("rocket.jpg",), "text": ("text.png",),
}
VARIANTS_PER_PHOTO = 5
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb+m3", "en-us+m7", "en-gb-x-rp+f2", "en-us+f4", "en-029")
SENTENCES = 11  # espeak-ng utterances, plus the recorded sentence


# ----------------------------------------------------------------------------- text


def documents() -> list[tuple[str, str]]:
    """(source name, text): the license texts found on this machine, then standard-library docstrings."""
    import importlib

    docs = []
    for name in LICENSES:
        p = Path("/usr/share/common-licenses") / name
        if p.is_file():
            docs.append((name.lower().replace(".", "_"), p.read_text(errors="replace")))
    for mod in DOC_MODULES:
        text = importlib.import_module(mod).__doc__ or ""
        if len(text.split()) > 60:
            docs.append((f"pydoc_{mod}", text))
    return docs


@dataclass(frozen=True)
class Style:
    """One source's typesetting: what the lines of one scanned page share."""

    font: str
    height: int
    paper: tuple[int, int, int]
    ink: tuple[int, int, int]
    noise: float
    blur: float


def style(rng: np.random.Generator) -> Style:
    from realdata import font_paths

    fonts = font_paths()
    return Style(font=str(fonts[int(rng.integers(0, len(fonts)))]) if fonts else "",
                 height=int(rng.integers(32, 72)),
                 paper=tuple(int(v) for v in rng.integers(170, 256, 3)),
                 ink=tuple(int(v) for v in rng.integers(0, 90, 3)),
                 noise=float(rng.uniform(1, 10)), blur=float(rng.uniform(0, 1.2)))


def render_line(text: str, st: Style, rng: np.random.Generator):
    """One text line in ``st``, cropped with a margin (what a detector hands the recognizer)."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    size = max(10, int(st.height * rng.uniform(0.6, 0.75)))
    font = ImageFont.truetype(st.font, size) if st.font else ImageFont.load_default(size=size)
    left, top, right, bottom = font.getbbox(text)
    pad = max(2, int(st.height * rng.uniform(0.08, 0.2)))
    w, h = right - left + 2 * pad, bottom - top + 2 * pad
    paper = np.clip(np.array(st.paper)[None, None] + rng.normal(0, st.noise, (h, w, 1)), 0, 255).astype(np.uint8)
    img = Image.fromarray(paper, "RGB")
    ImageDraw.Draw(img).text((pad - left, pad - top), text, font=font, fill=st.ink)
    if st.blur > 0.2:
        img = img.filter(ImageFilter.GaussianBlur(st.blur))
    return img


def source_lines(text: str, rng: np.random.Generator, n: int) -> list[str]:
    """``n`` consecutive lines of 1-5 words from a random place in ``text``."""
    words = [w for w in text.split() if any(c.isalnum() for c in w)]
    start = int(rng.integers(0, max(1, len(words) - 6 * n)))
    lines, i = [], start
    while len(lines) < n and i < len(words):
        k = int(rng.integers(1, 6))
        lines.append(" ".join(words[i:i + k]))
        i += k
    return lines


def fit_line(text: str, st: Style, rng: np.random.Generator, max_ratio: float):
    """Render ``text``; drop words from its end until width/height is at most ``max_ratio``."""
    words = text.split()
    while True:
        img = render_line(" ".join(words), st, rng)
        if img.width <= max_ratio * img.height or len(words) == 1:
            if img.width > max_ratio * img.height:  # one long word: cut the image
                img = img.crop((0, 0, int(max_ratio * img.height), img.height))
            return img
        words = words[:-1]


def text_samples(model: str, seed: int, scale: int = 1) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``cls``, ``rec`` or ``dddd``: every document in its own style."""
    for d, (name, text) in enumerate(documents()):
        rng = np.random.default_rng([seed, d])
        st = style(rng)
        for line in source_lines(text, rng, LINES_PER_SOURCE * scale):
            yield name, preprocess_line(model, line, st, rng)


def preprocess_line(model: str, line: str, st: Style, rng: np.random.Generator) -> dict:
    """``line`` typeset in ``st`` through the model's own preprocessing: the model's input dict."""
    from types import SimpleNamespace

    from PIL import Image

    if model == "cls":
        import rapidocr_onnxruntime.ch_ppocr_cls.text_cls as rcls

        img = fit_line(line, st, rng, 192 / 48 * 1.5)  # the classifier squeezes longer lines itself
        if rng.random() < 0.5:
            img = img.rotate(180)
        bgr = np.asarray(img)[:, :, ::-1].copy()
        x = rcls.TextClassifier.resize_norm_img(SimpleNamespace(cls_image_shape=[3, 48, 192]), bgr)
    elif model == "rec":
        import rapidocr_onnxruntime.ch_ppocr_rec.text_recognize as rrec

        img = fit_line(line, st, rng, 320 / 48)
        bgr = np.asarray(img)[:, :, ::-1].copy()
        ratio = max(320 / 48, bgr.shape[1] / bgr.shape[0])  # its __call__'s batch ratio, batch of one
        x = rrec.TextRecognizer.resize_norm_img(SimpleNamespace(rec_image_shape=[3, 48, 320]), bgr, ratio)
    else:
        img = fit_line(line, st, rng, 256 / 64)
        gray = img.resize((int(img.width * (64 / img.height)), 64), Image.LANCZOS).convert("L")
        arr = np.asarray(gray, np.float32)[:, :256] / 255.0
        canvas = np.full((64, 256), float(np.median(arr[:, :2])), np.float32)  # the line's own paper
        canvas[:, :arr.shape[1]] = arr
        x = canvas[None]
    return {"x" if model != "dddd" else "input1": x[None].astype(np.float32)}


# ----------------------------------------------------------------------------- many sources (issue 32 Done-when)

ESPEAK_VARIANTS = ("", "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7", "+f1", "+f2", "+f3", "+f4", "+f5",
                   "+klatt", "+croak", "+whisper")
ESPEAK_VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
                 "en-us-nyc")
SKIP_MODULES = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo")


def text_pool() -> list[tuple[str, list[str]]]:
    """(document, its words) for every local text: the licenses, the standard library's module docstrings, the
    Debian copyright files (a few hundred documents; duplicates dropped)."""
    import importlib
    import warnings

    seen: set[str] = set()
    pool = []

    def add(name: str, text: str) -> None:
        words = [w for w in text.split() if any(c.isalnum() for c in w) and len(w) < 30 and w.isprintable()]
        key = " ".join(words[:40])
        if len(words) >= 30 and key not in seen:
            seen.add(key)
            pool.append((name, words))

    for p in sorted(Path("/usr/share/common-licenses").glob("*")):
        if p.is_file():
            add(f"license:{p.name}", p.read_text(errors="replace"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mod in sorted(sys.stdlib_module_names):
            if mod.startswith("_") or mod in SKIP_MODULES:
                continue
            try:
                doc = importlib.import_module(mod).__doc__ or ""
            except Exception:  # noqa: BLE001 - a module that does not import here has no text for us
                continue
            add(f"pydoc:{mod}", doc)
    for p in sorted(Path("/usr/share/doc").glob("*/copyright")):
        add(f"copyright:{p.parent.name}", p.read_text(errors="replace"))
    return pool


def distinct_lines(pool: list[tuple[str, list[str]]], rng: np.random.Generator, used: set[str],
                   n: int) -> tuple[str, list[str]]:
    """(document, ``n`` consecutive lines of 2-6 words) from a random document and place, none seen before."""
    while True:
        name, words = pool[int(rng.integers(0, len(pool)))]
        i = int(rng.integers(0, max(1, len(words) - 14)))
        lines = []
        for _ in range(n):
            k = int(rng.integers(2, 7))
            lines.append(" ".join(words[i:i + k]))
            i += k
        if all(ln and ln.lower() not in used for ln in lines):
            used.update(ln.lower() for ln in lines)
            return name, lines


def all_fonts() -> list[str]:
    """Every TrueType font installed (fc-list; the realdata fonts when fontconfig is missing)."""
    from realdata import font_paths

    if shutil.which("fc-list"):
        out = subprocess.run(["fc-list", ":", "file"], capture_output=True, text=True).stdout
        fonts = sorted({f for ln in out.splitlines() if (f := ln.split(":")[0].strip()).endswith((".ttf", ".otf"))})
        if fonts:
            return fonts
    return [str(p) for p in font_paths()]


def many_text_samples(model: str, seed: int, sources: int) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``cls``, ``rec`` or ``dddd``: ``sources`` sources, each 1-2 distinct text lines in
    its own independently drawn style."""
    pool, fonts, used = text_pool(), all_fonts(), set()
    for s in range(sources):
        rng = np.random.default_rng([seed, 7, s])
        st = style(rng)
        st = Style(font=fonts[int(rng.integers(0, len(fonts)))], height=st.height, paper=st.paper, ink=st.ink,
                   noise=st.noise, blur=st.blur)
        doc, lines = distinct_lines(pool, rng, used, 2 if rng.random() < 0.2 else 1)
        name = f"s{s:04d}_{doc.split(':')[0]}"
        for line in lines:
            yield name, preprocess_line(model, line, st, rng)


def many_speech_samples(seed: int, sources: int) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``silero16k``: ``sources`` utterances (distinct sentence, voice and variant, speed,
    pitch, level, noise), 1-2 chunks of each at random places, with the FP32 model's own state."""
    import onnxruntime as ort
    from realmodels import silero_model

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(silero_model("silero_vad_16k_op15.onnx")), opts,
                                providers=["CPUExecutionProvider"])
    pool, used = text_pool(), set()
    for u in range(sources):
        rng = np.random.default_rng([seed, 9, u])
        doc, (sentence,) = distinct_lines(pool, rng, used, 1)
        sentence = " ".join([sentence] + [w for w in pool[int(rng.integers(0, len(pool)))][1][:int(rng.integers(0, 8))]])
        voice = ESPEAK_VOICES[int(rng.integers(0, len(ESPEAK_VOICES)))] + ESPEAK_VARIANTS[
            int(rng.integers(0, len(ESPEAK_VARIANTS)))]
        audio = at_level(espeak(sentence, voice, int(rng.integers(110, 230)), int(rng.integers(10, 90))), rng)
        chunks = (len(audio) - 512) // 512 + 1
        keep = set(int(i) for i in rng.choice(chunks, size=min(chunks, 1 + int(rng.random() < 0.5)), replace=False))
        state, context = np.zeros((2, 1, 128), np.float32), np.zeros((1, 64), np.float32)
        for i in range(max(keep) + 1):
            x = np.concatenate([context, audio[None, i * 512:(i + 1) * 512]], axis=1).astype(np.float32)
            feeds = {"input": x, "state": state, "sr": np.array(16000, dtype=np.int64)}
            if i in keep:
                yield f"u{u:04d}_{voice.replace('+', '_')}", {k: v.copy() for k, v in feeds.items()}
            _, state = sess.run(None, feeds)
            context = x[:, -64:]


# ----------------------------------------------------------------------------- photos


def skimage_photos(cache: Path) -> dict[str, list]:
    """{source: [PIL RGB image]} read from scikit-image's wheel (fetched once with ``pip download``)."""
    from PIL import Image

    wheels = sorted(cache.glob("scikit_image-*.whl"))
    if not wheels:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        SKIMAGE_WHEEL, "-d", str(cache)], check=True)
        wheels = sorted(cache.glob("scikit_image-*.whl"))
    photos: dict[str, list] = {}
    with zipfile.ZipFile(wheels[-1]) as z:
        for source, files in PHOTOS.items():
            photos[source] = [Image.open(io.BytesIO(z.read(f"skimage/data/{f}"))).convert("RGB") for f in files]
    return photos


def photo_variant(images: list, v: int, rng: np.random.Generator) -> dict:
    """Variant ``v`` of a source's photos: the first whole, later ones a seeded crop (40-100 % of each side);
    mirrored by a coin; through NudeNet's own preprocessing (its ``_read_image``)."""
    from nudenet.nudenet import _read_image
    from PIL import ImageOps

    img = images[v % len(images)]
    w, h = img.size
    cw, ch = (w, h) if v == 0 else (int(w * rng.uniform(0.4, 1.0)), int(h * rng.uniform(0.4, 1.0)))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    crop = img.crop((x0, y0, x0 + cw, y0 + ch))
    if rng.random() < 0.5:
        crop = ImageOps.mirror(crop)
    bgr = np.asarray(crop)[:, :, ::-1].copy()
    return {"images": np.asarray(_read_image(bgr, 320)[0], np.float32)}


def photo_samples(seed: int, cache: Path, scale: int = 1) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``yolo``: seeded crops and mirror images of each photo, NudeNet's preprocessing."""
    for p, (source, images) in enumerate(skimage_photos(cache).items()):
        rng = np.random.default_rng([seed, p])
        for v in range(VARIANTS_PER_PHOTO * scale):
            yield source, photo_variant(images, v, rng)


# ----------------------------------------------------------------------------- many photos (issue 32 Done-when)

PHOTO_DEBS = {  # Debian 12 package -> (version, {source: files under /usr/share/}): only the photographs
    "opencv-doc": ("4.6.0+dfsg-12", {s: tuple(f"doc/opencv-doc/examples/data/{f}" for f in fs) for s, fs in {
        "aero": ("aero1.jpg", "aero3.jpg"), "aloe": ("aloeL.jpg", "aloeR.jpg"), "apple": ("apple.jpg",),
        "baboon": ("baboon.jpg",), "basketball": ("basketball1.png", "basketball2.png"), "board": ("board.jpg",),
        "box": ("box_in_scene.png", "box.png"), "building": ("building.jpg",), "butterfly": ("butterfly.jpg",),
        "chicky": ("chicky_512.png",), "ela": ("ela_original.jpg", "ela_modified.jpg"), "fruits": ("fruits.jpg",),
        "graf": ("graf1.png", "graf3.png"), "home": ("home.jpg",), "books": ("left.jpg", "right.jpg"),
        "chessboard": tuple(f"{side}{i:02d}.jpg" for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14)
                            for side in ("left", "right")),
        "leuven": ("leuvenA.jpg", "leuvenB.jpg"), "licenseplate": ("licenseplate_motion.jpg",),
        "messi": ("messi5.jpg",), "orange": ("orange.jpg",), "rubberwhale": ("rubberwhale1.png", "rubberwhale2.png"),
        "squirrel": ("squirrel_cls.jpg",), "stuff": ("stuff.jpg",), "sudoku": ("sudoku.png",),
        "text": ("text_defocus.jpg", "text_motion.jpg")}.items()}),
    "lomiri-wallpapers-16.04": ("20.04.0-2", {f.split("_by_")[0].lower(): (f"backgrounds/{f}.jpg",) for f in (
        "Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Picture_0B_by_freespace", "Picture_1A_by_freespace",
        "Wine_by_Jakkub_Mede", "aitzgorri_by_Aitzol_Berasategi", "free_by_Peter_Nerlich",
        "friends_by_Aitzol_Berasategi", "life_by_Aitzol_Berasategi", "picosdeeuropa_by_Aitzol_Berasategi",
        "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi")}),
    "lomiri-wallpapers-20.04": ("20.04.0-2", {"kleiber": ("backgrounds/Kleiber_by_Lukas_Baubkus.jpg",)}),
    "mate-backgrounds": ("1.26.0-1", {f.lower(): (f"backgrounds/mate/nature/{f}.jpg",) for f in (
        "Aqua", "Blinds", "Dune", "FreshFlower", "Garden", "GreenMeadow", "LadyBird", "RainDrops", "Storm",
        "TwoWings", "Wood", "YellowFlower")}),
    "lxqt-themes": ("1.2.0-1", {f.split(".")[0].lower(): (f"lxqt/wallpapers/{f}",) for f in (
        "after-the-rain.jpg", "appleflower.png", "butterfly.png", "Butterfly-Kenneth-Wimer.jpg", "flowers.png",
        "fog.jpg")}),
    "plasma-workspace-wallpapers": ("4:5.27.5-2", {f.lower(): (f"wallpapers/{f}/contents/images/2560x1600.jpg",)
                                                   for f in ("BytheWater", "ColdRipple", "DarkestHour", "EveningGlow",
                                                             "FallenLeaf", "Grey", "OneStandsOut", "Path", "summer_1am")}),
}
GCOMPRIS = ("gcompris-qt-data", "3.1-2", {  # activity (its rcc) -> folders of photographs in it: one photo a source
    "categorization": ("tools", "renewable", "fishes", "others", "numbers", "alphabets"),  # its monuments: below
    "erase": ("",), "explore_monuments": ("usa", "egypt", "india", "france", "germany", "wonders"),
    "explore_world_animals": ("animals",), "explore_farm_animals": ("animals",), "explore_world_music": ("music",),
    "clickgame": ("sea",)})  # the underwater backgrounds sea1-6 (its fish sprites are cut-outs)


def fetch_deb(package: str, version: str, cache: Path) -> Path:
    """The package's .deb in ``cache`` (``apt-get download PACKAGE=VERSION`` once; never installed)."""
    debs = sorted(cache.glob(f"{package}_*.deb"))
    if not debs:
        if shutil.which("apt-get") is None:
            raise SystemExit(f"apt-get is missing: the many-source yolo set reads Debian 12 packages ({package})")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "-q", f"{package}={version}"], cwd=cache, check=True)
        debs = sorted(cache.glob(f"{package}_*.deb"))
    return debs[-1]


def deb_files(deb: Path, wanted: set[str]) -> dict[str, bytes]:
    """{path under /usr/share/: bytes} for the ``wanted`` paths in a .deb (``dpkg-deb --fsys-tarfile``, streamed)."""
    import tarfile

    if shutil.which("dpkg-deb") is None:
        raise SystemExit("dpkg-deb is missing: the many-source yolo set reads Debian packages")
    found = {}
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                name = member.name.removeprefix("./").removeprefix("usr/share/")
                if name in wanted and member.isfile():
                    found[name] = tar.extractfile(member).read()
    return found


def rcc_files(blob: bytes) -> dict[str, bytes]:
    """{path: bytes} of a Qt binary resource (``.rcc``): GCompris keeps each activity's images in one."""
    import struct
    import zlib

    version, tree, data, names = struct.unpack(">IIII", blob[4:20])
    entry = 14 if version < 2 else 22  # version 2 adds each node's modification time

    def name(off: int) -> str:
        n = struct.unpack(">H", blob[names + off:names + off + 2])[0]
        return blob[names + off + 6:names + off + 6 + 2 * n].decode("utf-16-be")

    files: dict[str, bytes] = {}
    todo = [(0, "")]
    while todo:
        i, prefix = todo.pop()
        e = tree + i * entry
        name_off, flags = struct.unpack(">IH", blob[e:e + 6])
        path = f"{prefix}{name(name_off)}" if i else ""
        if flags & 2:  # a directory: its children are consecutive entries
            count, first = struct.unpack(">II", blob[e + 6:e + 14])
            todo += [(c, f"{path}/" if i else "") for c in range(first, first + count)]
        else:
            off = data + struct.unpack(">I", blob[e + 10:e + 14])[0]
            body = blob[off + 4:off + 4 + struct.unpack(">I", blob[off:off + 4])[0]]
            files[path] = zlib.decompress(body[4:]) if flags & 1 else body
    return files


def many_photos(cache: Path) -> dict[str, list]:
    """{source: [PIL RGB image]}: scikit-image's 20 photos, the photographs of PHOTO_DEBS (one scene a source:
    stereo pairs, an image and its edit, one calibration session), and GCompris's photographs (one a source)."""
    from PIL import Image

    def rgb(b: bytes):
        return Image.open(io.BytesIO(b)).convert("RGB")

    photos = {f"skimage_{s}": images for s, images in skimage_photos(cache).items()}
    for package, (version, sources) in PHOTO_DEBS.items():
        files = deb_files(fetch_deb(package, version, cache), {f for fs in sources.values() for f in fs})
        short = package.split("-")[0]
        for source, fs in sources.items():
            photos[f"{short}_{source}"] = [rgb(files[f]) for f in fs]
    package, version, activities = GCOMPRIS
    rccs = deb_files(fetch_deb(package, version, cache), {f"gcompris-qt/rcc/{a}.rcc" for a in activities})
    for activity, folders in activities.items():
        for path, blob in sorted(rcc_files(rccs[f"gcompris-qt/rcc/{activity}.rcc"]).items()):
            folder, _, file = path.removeprefix(f"gcompris/src/activities/{activity}/resource/").rpartition("/")
            folder = folder.rpartition("/")[2]  # categorization's images/tools: tools
            if file.endswith(".webp") and any(folder == f or (f == "sea" and file.startswith("sea")) for f in folders):
                photos[f"gcompris_{activity}_{(folder + '_') if folder else ''}{file[:-5]}"] = [rgb(blob)]
    return photos


def many_photo_samples(seed: int, cache: Path, sources: int) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``yolo``: ``sources`` photo sources (scikit-image's 20 always, the rest drawn; all
    there are when fewer), 1-2 variants each (1 source in 5 gets a second), NudeNet's preprocessing. The first
    variant is the source's first photo whole, the second a seeded crop (40-100 % of each side) of its next
    photo; each mirrored by a coin."""
    photos = many_photos(cache)
    names = sorted(photos)
    rest = [n for n in names if not n.startswith("skimage_")]
    keep = sorted(n for n in names if n.startswith("skimage_"))
    draw = np.random.default_rng([seed, 11]).permutation(len(rest))[:max(0, sources - len(keep))]
    for s, name in enumerate(sorted(keep + [rest[i] for i in draw])):
        rng = np.random.default_rng([seed, 13, s])
        images = photos[name]
        for v in range(1 + int(rng.random() < 0.2)):
            yield name, photo_variant(images, v, rng)


# ----------------------------------------------------------------------------- files (magika)

MAGIKA_SOURCES = 150  # packages in the set made without --sources
SKIP_TREES = ("/proc", "/sys", "/dev", "/tmp", "/work", "/root/.cache")


def owned_files() -> dict[str, list[str]]:
    """{package: the paths it installed}: every Debian package (dpkg's ``/var/lib/dpkg/info/*.list``) and every
    Python distribution of this interpreter (its ``*.dist-info/RECORD``). A package is one team's files, built
    by one toolchain with one set of conventions: what makes two of its files alike."""
    import csv
    import site

    owned: dict[str, list[str]] = {}
    for lst in sorted(Path("/var/lib/dpkg/info").glob("*.list")):
        owned[f"deb_{lst.stem.split(':')[0]}"] = lst.read_text(errors="replace").splitlines()
    for sp in site.getsitepackages():
        for record in sorted(Path(sp).glob("*.dist-info/RECORD")):
            name = record.parent.name.split("-")[0].lower()
            with open(record, newline="") as f:
                owned[f"py_{name}"] = [str(Path(sp) / row[0]) for row in csv.reader(f) if row]
    return owned


def magika_features(magika, path: Path) -> np.ndarray | None:
    """The model's input for ``path`` as magika 1.0 makes it (its own ``_get_result_or_features_from_path``:
    strip, first and last 1024 bytes, padding token 256; laid out beg then end as its
    ``_get_raw_predictions`` does), or None where magika decides without its model (empty, tiny, a few bytes
    after stripping, unreadable)."""
    try:
        _, features = magika._get_result_or_features_from_path(path)
    except OSError:
        return None
    if features is None:
        return None
    cfg = magika._model_config
    return np.asarray([features.beg[:cfg.beg_size] + features.end[-cfg.end_size:]], np.int32)


def file_samples(seed: int, sources: int, per_source: int = 1) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``magika``: ``sources`` packages drawn at random from those on this machine with a
    file magika runs its model on; from each, ``per_source`` files (one more for 1 source in 5) drawn at
    random among its regular files. Files whose features were already taken (the same license text in two
    packages) are skipped: a sample must not be in both halves."""
    from magika import Magika

    magika = Magika()
    owned = owned_files()
    names = sorted(owned)
    seen: set[bytes] = set()
    rng = np.random.default_rng([seed, 17])
    taken = 0
    for name in (names[i] for i in rng.permutation(len(names))):
        if taken == sources:
            return
        want = per_source + int(rng.random() < 0.2)
        files = [f for f in owned[name] if not f.startswith(SKIP_TREES)]
        got = []
        for i in rng.permutation(len(files))[:50 * want]:
            p = Path(files[i])
            if len(got) == want:
                break
            if p.is_symlink() or not p.is_file():
                continue
            x = magika_features(magika, p)
            if x is not None and (key := x.tobytes()) not in seen:
                seen.add(key)
                got.append(x)
        if got:
            taken += 1
            for x in got:
                yield name, {"bytes": x}


# ----------------------------------------------------------------------------- speech


def espeak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """espeak-ng's rendering of ``text``, float32 at 16 kHz."""
    import wave

    from scipy.signal import resample_poly

    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is missing: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(out), text],
                       check=True, capture_output=True)
        with wave.open(str(out)) as w:
            sr = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64) / 32768
    g = np.gcd(sr, 16000)
    return resample_poly(pcm, 16000 // g, sr // g)


def at_level(clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Speech at -30..-6 dBFS peak in pinkish room noise at 0..25 dB SNR, with 0.3 s of noise before and after."""
    pad = np.zeros(4800)
    speech = np.concatenate([pad, clean / (np.abs(clean).max() + 1e-12), pad]) * 10 ** (rng.uniform(-30, -6) / 20)
    noise = np.cumsum(rng.normal(0, 1, len(speech))) * 0.02 + rng.normal(0, 1, len(speech))
    noise -= np.convolve(noise, np.ones(400) / 400, mode="same")
    loud = speech[np.abs(speech) > 0.1 * np.abs(speech).max()]
    noise *= np.sqrt(np.mean(loud**2) / np.mean(noise**2)) * 10 ** (-rng.uniform(0, 25) / 20)
    return (speech + noise).astype(np.float32)


def speech_samples(seed: int, scale: int = 1) -> Iterator[tuple[str, dict]]:
    """(source, sample) for ``silero16k``: each utterance's every 12th chunk (every ``12 // scale``-th), with the
    FP32 model's own state."""
    import wave

    from realdata import recorded_speech_path, silero_samples
    from realmodels import silero_model

    model = silero_model("silero_vad_16k_op15.onnx")
    utterances: list[tuple[str, Callable[[], np.ndarray]]] = []
    texts = [t for _, t in documents()]
    for i in range(SENTENCES):
        rng = np.random.default_rng([seed, 100 + i])
        words = texts[i % len(texts)].split()
        start = int(rng.integers(0, max(1, len(words) - 14)))
        sentence = " ".join(words[start:start + int(rng.integers(6, 14))])
        voice, speed, pitch = VOICES[i % len(VOICES)], int(rng.integers(130, 200)), int(rng.integers(20, 80))
        utterances.append((f"espeak_{i:02d}", lambda s=sentence, v=voice, sp=speed, p=pitch: espeak(s, v, sp, p)))

    def recorded() -> np.ndarray:
        with wave.open(str(recorded_speech_path())) as w:
            return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64) / 32768

    utterances.append(("arctic_a0007", recorded))
    for u, (source, make) in enumerate(utterances):
        audio = at_level(make(), np.random.default_rng([seed, 200 + u]))
        for s in silero_samples(model, range(1), every=max(1, 12 // scale), speech=lambda _seed, _secs, a=audio: a):
            yield source, s


# ----------------------------------------------------------------------------- driver


def model_path(model: str) -> Path:
    from realmodels import ddddocr_model, magika_model, nudenet_model, rapidocr_model, silero_model

    if model in ("cls", "rec"):
        return rapidocr_model(model)
    if model == "dddd":
        return ddddocr_model("common.onnx")
    if model == "yolo":
        return nudenet_model()
    if model == "magika":
        return magika_model()
    return silero_model("silero_vad_16k_op15.onnx")


def make(model: str, out: Path, seed: int = 0, scale: int = 1, sources: int = 0) -> Path:
    """Write ``out/model/SOURCE/NNN.npz`` and ``meta.json``; returns the model folder. ``sources``: the
    many-source set of that many sources (0: the per-document sets)."""
    folder = out / model
    if folder.exists():
        shutil.rmtree(folder)
    if model == "magika":
        samples = file_samples(seed, sources or MAGIKA_SOURCES, scale)
    elif sources and model in ("cls", "rec", "dddd"):
        samples = many_text_samples(model, seed, sources)
    elif sources and model == "silero16k":
        samples = many_speech_samples(seed, sources)
    elif sources and model == "yolo":
        samples = many_photo_samples(seed, out / "_packages", sources)
    else:
        samples = (text_samples(model, seed, scale) if model in ("cls", "rec", "dddd")
                   else photo_samples(seed, out / "_wheels", scale) if model == "yolo" else speech_samples(seed, scale))
    counts: dict[str, int] = {}
    for source, sample in samples:
        d = folder / source
        d.mkdir(parents=True, exist_ok=True)
        np.savez(d / f"{counts.get(source, 0):03d}.npz", **sample)
        counts[source] = counts.get(source, 0) + 1
    meta = {"model": str(model_path(model)), "seed": seed, "scale": scale, "many_sources": sources,
            "samples": sum(counts.values()), "sources": counts, "made_by": "benchmarks/gate_data.py"}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder


def ensure(model: str, out: Path = DEFAULT_OUT, seed: int = 0, scale: int = 1, sources: int = 0) -> Path:
    """The model's sample folder, made if it is missing or was made with another seed, scale or source count."""
    meta = out / model / "meta.json"
    if meta.is_file():
        made = json.loads(meta.read_text())
        if (made.get("seed", 0), made.get("scale", 1), made.get("many_sources", 0)) == (seed, scale, sources):
            return out / model
    return make(model, out, seed, scale, sources)


def default_out(sources: int = 0) -> Path:
    """Where the sets live: ``.cache/gate_data``, or ``.cache/gate_data_sN`` for the many-source sets."""
    return DEFAULT_OUT if not sources else DEFAULT_OUT.with_name(f"gate_data_s{sources}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path, default=None, help="default .cache/gate_data (.cache/gate_data_sN with --sources N)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=int, default=1,
                    help="k times the samples per source (text lines, photo variants; speech chunks k times as often)")
    ap.add_argument("--sources", type=int, default=0,
                    help="the many-source sets: N sources of 1-2 text lines / utterances of 1-2 chunks / photo variants")
    ap.add_argument("--force", action="store_true", help="make the sets again even when present")
    args = ap.parse_args()
    out = args.out or default_out(args.sources)
    for model in args.models.split(","):
        folder = (make(model, out, args.seed, args.scale, args.sources) if args.force
                  else ensure(model, out, args.seed, args.scale, args.sources))
        meta = json.loads((folder / "meta.json").read_text())
        print(f"{model}: {meta['samples']} samples from {len(meta['sources'])} sources in {folder}")


if __name__ == "__main__":
    main()
