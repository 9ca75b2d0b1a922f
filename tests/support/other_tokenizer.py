"""A tiny random causal LM with a tokenizer of its own (a small byte-level BPE trained here, offline), for
tests of a teacher that does not share the student's tokenizer (rlpost/logprobs/cross_tokenizer.py)."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "What is 3 + 4? The answer is 7.",
    "Calculate 12 * 5 and give only the final answer: 60",
    "<|im_start|>user\nWhat is 9 - 2?<|im_end|>\n<|im_start|>assistant\n7<|im_end|>",
] * 20
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def other_tokenizer_model(folder: Path) -> Path:
    """Write (once) a folder with a 300-token byte-level BPE tokenizer and a seeded tiny Llama over it."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    folder.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
