"""Lightning training of LoRA / QLoRA adapters (ESC-Role now, ESC-RANK later)."""
