#!/usr/bin/env python3
"""Dequantize a llama-architecture GGUF file (SmolLM2-135M-Instruct Q4_1) into a Hugging Face
model folder (safetensors + tokenizer) that vLLM can load, using transformers' GGUF loader.

usage: gguf_to_hf.py GGUF_FILE OUT_DIR
"""
import argparse
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf_file")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    started = time.time()
    folder, name = os.path.split(os.path.abspath(args.gguf_file))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    # transformers marks a GGUF-loaded model as quantized although its weights are dequantized by now;
    # a saved "quantization_config" would make vLLM look for a quantization method, so drop it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(args.out_dir)
    tokenizer.save_pretrained(args.out_dir)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out_dir}: {params} parameters in {time.time() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
