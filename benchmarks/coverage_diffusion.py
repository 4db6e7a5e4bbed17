"""Diffusion models for benchmarks/build_coverage.py: ``diffusers`` configs with seeded random weights.

A conditional UNet (cross-attention down/up blocks, the timestep a 0-d input as pipelines export it),
a VAE decoder and a ControlNet (its ``conditioning_scale`` a 0-d input, as optimum exports it); tiny
(channels 32/64, 16x16 latents), ``torch.onnx.export`` (opset 17, static shapes). Needs ``diffusers``
beside the ``bench`` extra (``pip install diffusers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coverage_models import Generated, first_line

FAMILY = "diffusion"
LATENT, TEXT, TOKENS = 16, 32, 8
BLOCKS = {"block_out_channels": (32, 64), "layers_per_block": 1, "cross_attention_dim": TEXT,
          "attention_head_dim": 8, "norm_num_groups": 8}


def _unet() -> tuple[Any, tuple[Any, ...], list[str]]:
    import diffusers
    import torch

    unet = diffusers.UNet2DConditionModel(
        sample_size=LATENT, in_channels=4, out_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **BLOCKS)

    class Unet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = unet

        def forward(self, sample: Any, timestep: Any, text: Any) -> Any:
            return self.m(sample, timestep, encoder_hidden_states=text).sample

    return Unet(), _latent_inputs(), ["sample", "timestep", "encoder_hidden_states"]


def _latent_inputs() -> tuple[Any, ...]:
    import torch

    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 4, LATENT, LATENT, generator=g), torch.tensor(999.0),
            torch.randn(1, TOKENS, TEXT, generator=g))


def _controlnet() -> tuple[Any, tuple[Any, ...], list[str]]:
    import diffusers
    import torch

    net = diffusers.ControlNetModel(in_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                    conditioning_embedding_out_channels=(8, 16), **BLOCKS)

    class ControlNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = net

        def forward(self, sample: Any, timestep: Any, text: Any, cond: Any, scale: Any) -> Any:
            down, mid = self.m(sample, timestep, encoder_hidden_states=text, controlnet_cond=cond,
                               conditioning_scale=scale, return_dict=False)
            return (*down, mid)

    cond = torch.randn(1, 3, 2 * LATENT, 2 * LATENT, generator=torch.Generator().manual_seed(1))
    return (ControlNet(), (*_latent_inputs(), cond, torch.tensor(1.0)),
            ["sample", "timestep", "encoder_hidden_states", "controlnet_cond", "conditioning_scale"])


def _vae_decoder() -> tuple[Any, tuple[Any, ...], list[str]]:
    import diffusers
    import torch

    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32),
                                  latent_channels=4, norm_num_groups=8)

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = vae

        def forward(self, z: Any) -> Any:
            return self.m.decode(z).sample

    return Decoder(), (torch.randn(1, 4, LATENT, LATENT, generator=torch.Generator().manual_seed(0)),), ["latent"]


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str]]]] = {
    "unet2d-conditional": _unet, "controlnet": _controlnet, "vae-decoder": _vae_decoder}


def generate(folder: Path, keep: Callable[[str], bool]) -> Iterator[Generated]:
    for name, make in MODELS.items():
        if not keep(name):
            continue
        try:
            import torch

            torch.manual_seed(0)
            model, inputs, names = make()
            path = folder / f"{name}.onnx"
            with torch.no_grad():
                torch.onnx.export(model.eval(), inputs, str(path), input_names=names, opset_version=17, dynamo=False)
            yield Generated(FAMILY, name, path, shapes=tuple((n, tuple(x.shape)) for n, x in zip(names, inputs)))
        except Exception as exc:  # no diffusers, or an export that fails: a row, not the end of the run
            yield Generated(FAMILY, name, None, f"export failed: {first_line(exc)}")
