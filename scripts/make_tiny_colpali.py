#!/usr/bin/env python3
"""Create a tiny ColPali model (random weights, ColPaliForRetrieval: SigLIP + Gemma + a 128-value
projection) with its processor, locally, from the installed transformers' own classes: no hub
access. vLLM serves it with `--runner pooling` (task token_embed) like vidore/colpali-v1.3-hf.

The tokenizer is a word-level one built here (Gemma's special tokens, `<image>`, lower-case words
and letters), so a question's tokens are its words. Images are 28x28 pixels: 4 image tokens.

usage: make_tiny_colpali.py OUT_DIR
"""
import argparse
import string
import sys
import time

import os

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import (
    ColPaliConfig,
    ColPaliForRetrieval,
    GemmaConfig,
    PaliGemmaConfig,
    PaliGemmaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessor,
    SiglipVisionConfig,
)

WORDS = (
    "which what where table attribute attributes types type marshalling unique pointers pointer "
    "reference counting com interface interfaces stub generator error exception index keyword "
    "describe the image a an of and or to in for is are page document question answer"
).split()


def tokenizer():
    # vLLM's PaliGemma processor appends "\n" to the prompt and looks its id up.
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "\n"]
    vocab = {t: i for i, t in enumerate(specials + list(string.ascii_lowercase + string.digits) + WORDS)}
    vocab["<image>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )
    return fast, len(vocab), vocab["<image>"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    args = ap.parse_args()
    started = time.time()
    torch.manual_seed(0)
    tok, vocab_size, image_id = tokenizer()
    text = GemmaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        projection_dim=64,
        vision_use_head=False,
    )
    vlm = PaliGemmaConfig(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        image_token_index=image_id,
        projection_dim=64,
        hidden_size=64,
    )
    config = ColPaliConfig(vlm_config=vlm, embedding_dim=128)
    model = ColPaliForRetrieval(config).to(torch.float32)
    processor = PaliGemmaProcessor(
        image_processor=SiglipImageProcessor(size={"height": 28, "width": 28}, image_seq_length=4),
        tokenizer=tok,
    )
    model.save_pretrained(args.out_dir)
    processor.save_pretrained(args.out_dir)
    # transformers 5 saves the SigLIP tower without its `vision_model.` level; the published
    # checkpoints (vidore/colpali-v1.3-hf, written by transformers 4) and vLLM's loader have it.
    path = os.path.join(args.out_dir, "model.safetensors")
    tensors = load_file(path)
    renamed = {
        k.replace("vlm.vision_tower.", "vlm.vision_tower.vision_model.", 1)
        if k.startswith("vlm.vision_tower.") and not k.startswith("vlm.vision_tower.vision_model.")
        else k: v
        for k, v in tensors.items()
    }
    save_file(renamed, path, metadata={"format": "pt"})
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out_dir}: {params} parameters in {time.time() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
