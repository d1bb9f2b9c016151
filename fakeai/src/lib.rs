//! A scriptable fault-injection OpenAI-compatible server for tests.
