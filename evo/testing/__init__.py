"""Test helpers that need no GPU and no network beyond 127.0.0.1 (e.g. a scripted LLM server)."""
