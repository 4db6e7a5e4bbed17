"""Real(istic) input data for the real models, generated deterministically (nothing binary committed).

OCR: text rendered with a real TrueType font (DejaVu from fonts-dejavu-core, or the
one Pillow bundles) on paper-like backgrounds, preprocessed the way PaddleOCR
documents it. Silero VAD: speech-like audio synthesised with numpy — a glottal pulse
train with jittered pitch through vowel formant resonators, syllable envelopes, pauses
and background noise — or a real recorded English sentence (CMU ARCTIC a0007, 16 kHz,
4 s, shipped in pysptk's wheel source: the test extra) at a seed-chosen level and
signal-to-noise ratio; fed chunk by chunk with the recurrent state the model itself
produces, as silero-vad's own wrapper does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/TTF"))
WORDS = (
    "invoice total amount date street river model engine tensor output quantize calibrate "
    "station number payment receipt account balance delivery office market coffee window "
    "garden people weather summer yellow orange purple button license version battery"
).split()


def font_paths() -> list[Path]:
    found: list[Path] = []
    for d in FONT_DIRS:
        if d.is_dir():
            found += sorted(p for p in d.glob("*.ttf") if "Oblique" not in p.name and "Italic" not in p.name)
    return found


def _font(size: int, idx: int):
    from PIL import ImageFont

    paths = font_paths()
    if paths:
        return ImageFont.truetype(str(paths[idx % len(paths)]), size)
    return ImageFont.load_default(size=size)  # Pillow >= 10.1 ships a scalable font


def _text(rng: np.random.Generator, n_words: int) -> str:
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), n_words)]
    if rng.random() < 0.5:
        words.append(str(int(rng.integers(10, 99999))))
    return " ".join(w.capitalize() if rng.random() < 0.3 else w for w in words)


def _paper(rng: np.random.Generator, h: int, w: int):
    from PIL import Image

    base = rng.integers(200, 255, size=3)
    noise = rng.normal(0, 6, size=(h, w, 1))
    arr = np.clip(base[None, None, :] + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB")


def text_line_image(seed: int, height: int = 48):
    """One rendered text line, tightly cropped (recognizer/classifier input)."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    text = _text(rng, int(rng.integers(1, 4)))
    font = _font(int(height * rng.uniform(0.55, 0.75)), int(rng.integers(0, 100)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(height * 0.15)
    w, h = right - left + 2 * pad, bottom - top + 2 * pad
    img = _paper(rng, h, w)
    ink = tuple(int(v) for v in rng.integers(0, 70, size=3))
    ImageDraw.Draw(img).text((pad - left, pad - top), text, font=font, fill=ink)
    return img


def document_image(seed: int, size: tuple[int, int] = (320, 480)):
    """A page with several lines of text (detector input); size (H, W), multiples of 32."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    h, w = size
    img = _paper(rng, h, w)
    draw = ImageDraw.Draw(img)
    y = int(rng.integers(8, 30))
    while y < h - 30:
        fs = int(rng.integers(14, 30))
        font = _font(fs, int(rng.integers(0, 100)))
        x = int(rng.integers(5, w // 3))
        ink = tuple(int(v) for v in rng.integers(0, 70, size=3))
        draw.text((x, y), _text(rng, int(rng.integers(2, 5))), font=font, fill=ink)
        y += int(fs * rng.uniform(1.5, 2.6))
    return img


def save_images(folder: Path, images) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, img in enumerate(images):
        p = folder / f"{i:03d}.png"
        img.save(p)
        paths.append(p)
    return paths


def ocr_det_images(folder: Path, seeds: range, *, sizes=((320, 480), (256, 352), (384, 320))) -> list[Path]:
    return save_images(folder, [document_image(s, sizes[s % len(sizes)]) for s in seeds])


def ocr_line_images(folder: Path, seeds: range, *, flip_every: int = 0) -> list[Path]:
    """Text-line crops; with ``flip_every`` k, every k-th is upside down (what the angle classifier detects)."""
    imgs = []
    for s in seeds:
        img = text_line_image(s)
        if flip_every and s % flip_every == 0:
            img = img.rotate(180)
        imgs.append(img)
    return save_images(folder, imgs)


SKIN = ((255, 219, 172), (241, 194, 125), (224, 172, 105), (198, 134, 66), (141, 85, 36))


def scene_image(seed: int, size: tuple[int, int] = (360, 480)):
    """A rendered outdoor scene (object-detector input; YOLOv8n's): sky and ground gradients with texture,
    trees, buildings and people-like figures (skin-toned heads, arms and torsos, clothed or not), blurred
    and with sensor noise, so activations span what photos give. Size (H, W)."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    h, w = size
    horizon = int(h * rng.uniform(0.35, 0.6))
    sky0, sky1 = rng.integers(90, 200, 3), rng.integers(170, 255, 3)
    ground0, ground1 = rng.integers(40, 140, 3), rng.integers(20, 100, 3)
    t = np.linspace(0, 1, h)[:, None, None]
    arr = np.where(np.arange(h)[:, None, None] < horizon, sky0 + (sky1 - sky0) * t, ground0 + (ground1 - ground0) * t)
    arr = np.broadcast_to(arr, (h, w, 3)) + rng.normal(0, 8, (h, w, 1)) * (np.arange(h)[:, None, None] >= horizon)
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(0, 4))):  # buildings
        x, bw, bh = int(rng.integers(0, w)), int(rng.integers(40, 140)), int(rng.integers(40, horizon))
        draw.rectangle((x, horizon - bh, x + bw, horizon + 5), fill=tuple(int(v) for v in rng.integers(60, 220, 3)))
    for _ in range(int(rng.integers(1, 5))):  # trees
        x, r = int(rng.integers(0, w)), int(rng.integers(15, 45))
        draw.rectangle((x - 4, horizon - 2 * r, x + 4, horizon + 10), fill=(90, 60, 30))
        draw.ellipse((x - r, horizon - 3 * r, x + r, horizon - r), fill=(30, int(rng.integers(90, 160)), 40))
    for _ in range(int(rng.integers(1, 4))):  # people
        ph = int(rng.integers(h // 4, int(h * 0.8)))
        x, y = int(rng.integers(20, w - 20)), int(rng.integers(horizon, h)) - ph // 2
        skin = SKIN[int(rng.integers(0, len(SKIN)))]
        cloth = tuple(int(v) for v in rng.integers(0, 255, 3)) if rng.random() < 0.7 else skin
        hw = ph // 7
        draw.ellipse((x - hw // 2, y, x + hw // 2, y + hw), fill=skin)  # head
        draw.rectangle((x - hw, y + hw, x + hw, y + ph // 2), fill=cloth)  # torso
        draw.rectangle((x - hw - hw // 3, y + hw, x - hw, y + ph // 2), fill=skin)  # arms
        draw.rectangle((x + hw, y + hw, x + hw + hw // 3, y + ph // 2), fill=skin)
        legs = skin if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 120, 3))
        draw.rectangle((x - hw, y + ph // 2, x - 2, y + ph), fill=legs)
        draw.rectangle((x + 2, y + ph // 2, x + hw, y + ph), fill=legs)
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.5))))
    noisy = np.asarray(img, np.float32) + rng.normal(0, 4, (h, w, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


# ----------------------------------------------------------------------------- audio

SR = 16000
VOWEL_FORMANTS = ((730, 1090, 2440), (530, 1840, 2480), (270, 2290, 3010), (570, 840, 2410), (300, 870, 2240))


def _resonator(x: np.ndarray, freq: float, bw: float) -> np.ndarray:
    """A two-pole resonator (a formant), applied in the frequency domain (numpy only)."""
    r = np.exp(-np.pi * bw / SR)
    theta = 2 * np.pi * freq / SR
    n = 1 << int(np.ceil(np.log2(len(x) + 2048)))
    z = np.exp(-1j * 2 * np.pi * np.fft.rfftfreq(n))
    h = (1 - r) / (1 - 2 * r * np.cos(theta) * z + r * r * z * z)
    return np.fft.irfft(np.fft.rfft(x, n) * h, n)[: len(x)]


def speech_like(seed: int, seconds: float = 3.0) -> np.ndarray:
    """Speech-like audio: voiced syllables with pitch jitter and formants, pauses, noise floor."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    out = rng.normal(0, 0.003, n)  # room noise
    t = int(0.3 * SR)
    while t < n - SR // 5:
        syl = int(rng.uniform(0.12, 0.3) * SR)
        f0 = rng.uniform(90, 220)
        pitch = f0 * (1 + 0.1 * np.sin(np.linspace(0, rng.uniform(1, 3), syl))) * (1 + rng.normal(0, 0.01, syl))
        phase = np.cumsum(pitch / SR)
        pulses = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
        f1, f2, f3 = VOWEL_FORMANTS[int(rng.integers(0, len(VOWEL_FORMANTS)))]
        voiced = _resonator(pulses, f1, 80) + 0.6 * _resonator(pulses, f2, 100) + 0.3 * _resonator(pulses, f3, 120)
        if rng.random() < 0.5:  # a fricative onset
            k = syl // 4
            voiced[:k] += _resonator(rng.normal(0, 1, k), 4500, 1500) * 0.3
        env = np.sin(np.linspace(0, np.pi, syl)) ** 0.6
        seg = voiced * env
        seg = seg / (np.abs(seg).max() + 1e-9) * rng.uniform(0.2, 0.6)
        end = min(n, t + syl)
        out[t:end] += seg[: end - t]
        t = end + int(rng.uniform(0.03, 0.12) * SR)
        if rng.random() < 0.15:
            t += int(rng.uniform(0.3, 0.6) * SR)  # a pause between phrases
    return out.astype(np.float32)


def recorded_speech_path() -> Path:
    """CMU ARCTIC's a0007 (a US English speaker, 16 kHz mono, 4 s), as pysptk installs it."""
    import importlib.util

    spec = importlib.util.find_spec("pysptk")  # found, not imported: pysptk's import needs pkg_resources
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package pysptk is missing: run `make install` (it is in the test extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "example_audio_data" / "arctic_a0007.wav"


def recorded_speech(seed: int, seconds: float = 4.0) -> np.ndarray:
    """The recorded sentence at a level of -30..-6 dBFS peak with room noise at 0..25 dB SNR (both
    chosen by ``seed``): real speech, in the conditions a VAD decides in. ``seconds`` is ignored
    (the recording's length); the parameter keeps the signature of ``speech_like``."""
    import wave

    with wave.open(str(recorded_speech_path())) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2
        clean = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64) / 32768
    rng = np.random.default_rng(seed)
    speech = clean / np.abs(clean).max() * 10 ** (rng.uniform(-30, -6) / 20)
    noise = np.cumsum(rng.normal(0, 1, len(speech))) * 0.02 + rng.normal(0, 1, len(speech))  # pinkish
    noise -= np.convolve(noise, np.ones(400) / 400, mode="same")  # no DC drift
    loud = speech[np.abs(speech) > 0.1 * np.abs(speech).max()]
    snr_db = rng.uniform(0, 25)
    noise *= np.sqrt(np.mean(loud**2) / np.mean(noise**2)) * 10 ** (-snr_db / 20)
    return (speech + noise).astype(np.float32)


def silero_samples(
    model_path: Path, seeds: range, *, seconds: float = 2.0, every: int = 4, sr: int = SR, speech=speech_like
) -> list[dict]:
    """Input dicts for silero_vad.onnx as its wrapper feeds it (context + a 512-sample chunk at
    16 kHz, 32 + 256 at 8 kHz; the state the FP32 model produced on the preceding chunks);
    every ``every``-th chunk is kept. 8 kHz audio takes the model's other If branch.
    ``speech``: ``speech_like`` (synthesised) or ``recorded_speech`` (a real recording), per seed."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    samples = []
    chunk, ctx = (512, 64) if sr == SR else (256, 32)
    for seed in seeds:
        audio = speech(seed, seconds)
        if sr != SR:
            audio = audio.reshape(-1, SR // sr).mean(axis=1).astype(np.float32)
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, ctx), np.float32)
        for i, start in enumerate(range(0, len(audio) - chunk + 1, chunk)):
            x = np.concatenate([context, audio[None, start:start + chunk]], axis=1).astype(np.float32)
            feeds = {"input": x, "state": state, "sr": np.array(sr, dtype=np.int64)}
            if i % every == 0:
                samples.append({k: v.copy() for k, v in feeds.items()})
            _, state = sess.run(None, feeds)
            context = x[:, -ctx:]
    return samples
