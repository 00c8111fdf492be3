"""Batch APIs (OpenAI's Batch API, Anthropic's Message Batches) behind the chat backend interface:
`backend.BatchedBackend` submits, records the batches in the run folder (`ledger`), polls and
collects; `openai_batches` and `anthropic_batches` speak to each provider through its SDK."""
