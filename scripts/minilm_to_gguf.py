#!/usr/bin/env python3
"""Convert a sentence-transformers BERT model (all-MiniLM-L6-v2: safetensors + tokenizer.json)
into a GGUF file that llama.cpp's llama-server can serve with --embeddings.

Torch-free: needs only the PyPI packages gguf, safetensors and numpy. The layout written is the
one llama.cpp's own converter produces for the 'bert' architecture: WordPiece vocabulary with the
phantom-space convention ('##x' -> 'x', 'x' -> U+2581 'x'), mean (or CLS) pooling, matrices in F16.

usage: minilm_to_gguf.py MODEL_DIR OUT.gguf
"""
import argparse
import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import load_file

# Hugging Face BertModel tensor names -> llama.cpp 'bert' tensor names.
GLOBAL_TENSORS = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
LAYER_TENSORS = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
# Small tables llama.cpp expects in F32.
KEEP_F32 = {"position_embd.weight", "token_types.weight"}
SKIPPED = ("pooler.", "embeddings.position_ids")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pooling_type(model_dir):
    path = os.path.join(model_dir, "1_Pooling", "config.json")
    if not os.path.exists(path):
        return gguf.PoolingType.MEAN
    cfg = read_json(path)
    if cfg.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    if cfg.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    sys.exit(f"unsupported pooling configuration: {cfg}")


def gguf_tensor_name(hf_name):
    name = hf_name.removeprefix("bert.")
    if name.startswith(SKIPPED):
        return None
    if name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[name]
    parts = name.split(".")  # encoder.layer.<n>.<sub module...>.<weight|bias>
    if len(parts) < 5 or parts[0] != "encoder" or parts[1] != "layer":
        sys.exit(f"unexpected tensor {hf_name}")
    sub = ".".join(parts[3:-1])
    if sub not in LAYER_TENSORS:
        sys.exit(f"unexpected tensor {hf_name}")
    return f"blk.{parts[2]}.{LAYER_TENSORS[sub]}.{parts[-1]}"


def write_vocab(writer, tokenizer, cfg):
    vocab = tokenizer["model"]["vocab"]  # token -> id
    added = {t["content"]: t for t in tokenizer.get("added_tokens", [])}
    tokens = [""] * len(vocab)
    for tok, idx in vocab.items():
        tokens[idx] = tok
    kinds, pieces = [], []
    for tok in tokens:
        if tok in added and added[tok].get("special"):
            kinds.append(gguf.TokenType.CONTROL)
            pieces.append(tok)
            continue
        kinds.append(gguf.TokenType.USER_DEFINED if tok in added else gguf.TokenType.NORMAL)
        pieces.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
    writer.add_token_type_count(cfg.get("type_vocab_size", 2))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("jina-v2-en")
    writer.add_token_list(pieces)
    writer.add_token_types(kinds)

    def special_id(name):
        if name not in added:
            sys.exit(f"tokenizer has no {name} token")
        return added[name]["id"]

    writer.add_bos_token_id(special_id("[CLS]"))
    writer.add_eos_token_id(special_id("[SEP]"))
    writer.add_sep_token_id(special_id("[SEP]"))
    writer.add_unk_token_id(special_id("[UNK]"))
    writer.add_pad_token_id(special_id("[PAD]"))
    writer.add_mask_token_id(special_id("[MASK]"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.add_add_sep_token(False)
    writer.add_bool("tokenizer.ggml.normalizer.lowercase", True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    args = ap.parse_args()

    cfg = read_json(os.path.join(args.model_dir, "config.json"))
    tokenizer = read_json(os.path.join(args.model_dir, "tokenizer.json"))
    writer = gguf.GGUFWriter(args.out, "bert")
    writer.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    writer.add_license("apache-2.0")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_layer_norm_eps(cfg["layer_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling_type(args.model_dir))
    write_vocab(writer, tokenizer, cfg)

    count = 0
    for hf_name, data in load_file(os.path.join(args.model_dir, "model.safetensors")).items():
        name = gguf_tensor_name(hf_name)
        if name is None:
            continue
        data = data.astype(np.float32)
        if data.ndim == 2 and name not in KEEP_F32:
            data = data.astype(np.float16)
        writer.add_tensor(name, data)
        count += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out} ({count} tensors)", file=sys.stderr)


if __name__ == "__main__":
    main()
