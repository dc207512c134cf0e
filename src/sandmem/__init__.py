"""sandmem: sandboxed LLM agents with memory that carries across runs."""
