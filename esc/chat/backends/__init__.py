"""The built-in chat backends: each module registers its class with `esc.chat.base.REGISTRY`, which
imports every module of this package before its first lookup (a new module needs no import line).

* ``hf`` (:mod:`.hf`): a transformers causal LM (a hub id, a local directory or the embedded tiny
  model), optionally with a PEFT adapter, batched on one device;
* ``openai`` (:mod:`.openai_compat`): any OpenAI-compatible chat completions endpoint (OpenAI, or a
  local vLLM / SGLang / TGI server);
* ``baichuan_npc`` (:mod:`.baichuan_npc`): Baichuan's character (NPC) API, the paper's baseline
  role-player;
* ``canned`` (:mod:`.canned`): replies from a fixed list, to validate what reads conversations;
* ``vllm`` (:mod:`.vllm_inproc`): vLLM in this process (continuous batching, prefix caching, LoRA,
  constrained answers); needs the ``vllm`` package, which is imported only when used.
"""
