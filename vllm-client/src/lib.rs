//! An OpenAI-compatible HTTP client for vLLM and llama-server, on hyper 1.
