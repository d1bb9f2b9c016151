#!/usr/bin/env python3
"""Builds a tiny, real text-to-image diffusers pipeline with random weights in DIR.

Usage: make_tiny_diffusers.py DIR

A `StableDiffusionPipeline` made from configuration only, nothing downloaded: a small
`UNet2DConditionModel` (cross-attention on the text), a small `AutoencoderKL` (latents an
eighth of the image's size, as Stable Diffusion's), a 3-layer `CLIPTextModel` from
transformers' `CLIPTextConfig`, a `CLIPTokenizer` whose vocab.json / merges.txt are written
here (byte-level BPE: every byte, as a word's middle and as its end, plus a few merges) and a
`DDIMScheduler`; no safety checker. The weights are drawn with fixed seeds, so two builds are
the same pipeline. `save_pretrained(DIR)` writes it in the layout of a hub snapshot, which
`DiffusionPipeline.from_pretrained(DIR)` loads offline (HF_HUB_OFFLINE=1) the same way as a
real Stable Diffusion snapshot. Two steps take about 0.2 s for a 64x48 image on a CPU, 2 s for
512x512 (any multiple of 8 from 8x8). The images are structured noise, but a different prompt
gives a different image for the same seed (the text reaches the UNet through cross-attention).

Idempotent: a DIR that already loads is left as it is. The pipeline is built in DIR.tmp and
renamed, so a half-written DIR is never left behind. Prints DIR.
"""

import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

# Written into DIR; a DIR of another recipe (an older version of this script) is built again.
RECIPE = "horos-tiny-sd 1"
RECIPE_FILE = "horos_recipe.txt"
# The tokenizer's and the text encoder's sizes (CLIP's own: 49408 tokens, 77 positions).
MAX_LENGTH = 77
# A few merges, so the BPE really merges (words of these letters become fewer tokens).
MERGES = ["t h", "i n", "a n", "e r", "o n", "r e", "e d</w>", "th e</w>", "r ed</w>"]


def bytes_to_unicode():
    """GPT-2's / CLIP's map from bytes to printable characters (the BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def write_tokenizer_files(d):
    """vocab.json and merges.txt of a small CLIP BPE tokenizer; returns the vocabulary's size."""
    alphabet = list(bytes_to_unicode().values())
    tokens = alphabet + [c + "</w>" for c in alphabet]
    tokens += ["".join(m.split()) for m in MERGES]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")
    return vocab


def quiet():
    """No progress bars on stderr (the set-up's log)."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()


def build(out):
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tok_src = out + ".tokenizer-src"
    shutil.rmtree(tok_src, ignore_errors=True)
    vocab = write_tokenizer_files(tok_src)
    tokenizer = CLIPTokenizer.from_pretrained(tok_src, model_max_length=MAX_LENGTH)
    shutil.rmtree(tok_src, ignore_errors=True)

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=32,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    torch.manual_seed(1)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 16, 16, 32),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=64,
    )
    torch.manual_seed(2)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            max_position_embeddings=MAX_LENGTH,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"],
            pad_token_id=vocab["<|endoftext|>"],
            # Random embeddings are small; larger ones make prompts differ more after 3 layers.
            initializer_factor=4.0,
        )
    )
    scheduler = DDIMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    pipe.save_pretrained(tmp)
    with open(os.path.join(tmp, RECIPE_FILE), "w", encoding="utf-8") as f:
        f.write(RECIPE + "\n")
    loads(tmp, check=True)  # never rename a directory that does not load and generate
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def loads(d, check=False):
    """Whether d is this recipe's pipeline and `DiffusionPipeline.from_pretrained(d)` works (and,
    with check, draws a 16x8 image)."""
    try:
        with open(os.path.join(d, RECIPE_FILE), encoding="utf-8") as f:
            if f.read().strip() != RECIPE:
                return False
    except OSError:
        return False
    from diffusers import DiffusionPipeline

    try:
        pipe = DiffusionPipeline.from_pretrained(d)
        pipe.set_progress_bar_config(disable=True)
    except Exception as e:  # noqa: BLE001 - any failure means "build it again"
        if check:
            raise
        sys.stderr.write(f"[make_tiny_diffusers] {d} does not load ({e}): building it again\n")
        return False
    if check:
        g = torch.Generator().manual_seed(0)
        image = pipe(prompt="a check", width=16, height=8, num_inference_steps=2, generator=g).images[0]
        assert image.size == (16, 8), image.size
    return True


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    out = os.path.abspath(sys.argv[1])
    quiet()
    if loads(out):
        sys.stderr.write(f"[make_tiny_diffusers] {out} already holds a pipeline\n")
    else:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        build(out)
        sys.stderr.write(f"[make_tiny_diffusers] built {out}\n")
    print(out)


if __name__ == "__main__":
    main()
