"""The demo's tokenizer: a byte-level BPE built with ``tokenizers`` from a GGUF file's metadata, and the
ChatML prompt format SmolLM2-Instruct was trained with.

The GGUF metadata of SmolLM2 holds the vocabulary (``tokenizer.ggml.tokens``), the merges
(``tokenizer.ggml.merges``), the token types (3 = control: ``<|im_start|>``, ``<|im_end|>``, ...) and the
pre-tokenizer name ``smollm``: digits split one by one, then the GPT-2 split regex, then bytes mapped to
the GPT-2 byte alphabet (``tokenizers``' ``Digits(individual_digits=True)`` + ``ByteLevel``). The chat
template (``tokenizer.chat_template``) is ChatML with a default system prompt when the conversation has
none; :meth:`ChatTokenizer.chat_prompt` writes that format and takes the default system prompt from the
template.
"""
import re

__all__ = ["ChatTokenizer", "CONTROL_TOKEN_TYPE", "IM_START", "IM_END", "ENDOFTEXT"]

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
#: GGUF ``tokenizer.ggml.token_type`` of control tokens (llama.cpp's LLAMA_TOKEN_TYPE_CONTROL).
CONTROL_TOKEN_TYPE = 3
#: Pre-tokenizers the demo can build (GGUF ``tokenizer.ggml.pre``).
SUPPORTED_PRE = ("smollm",)

_SYSTEM_IN_TEMPLATE = re.compile(re.escape(IM_START) + r"system\n(.*?)" + re.escape(IM_END), re.S)


class ChatTokenizer:
    """Encode / decode text and write ChatML prompts.

    Args:
        tokenizer (tokenizers.Tokenizer): the byte-level BPE, special tokens added as special.
        default_system (str | None): system prompt the chat template inserts when the conversation
            has none (None: no system turn then).
    """

    def __init__(self, tokenizer, default_system=None):
        self.tokenizer = tokenizer
        self.default_system = default_system
        self.im_start_id = self._special_id(IM_START)
        self.im_end_id = self._special_id(IM_END)

    def _special_id(self, token):
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise ValueError(f"tokenizer: the vocabulary has no {token!r} token (a ChatML model needs it)")
        return i

    @property
    def vocab_size(self):
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text):
        """Token ids of ``text`` (special tokens written in the text are recognised; nothing is added)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens=True):
        """Text of ``ids``; bytes that do not form UTF-8 characters are replaced."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def chat_prompt(self, user, system=None):
        """The ChatML text of one user turn followed by the assistant's opening (the template with
        ``add_generation_prompt=True``)::

            <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{user}<|im_end|>\\n<|im_start|>assistant\\n

        ``system`` None: the template's default system prompt (no system turn if it has none)."""
        system = self.default_system if system is None else system
        text = f"{IM_START}system\n{system}{IM_END}\n" if system is not None else ""
        return text + f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"

    def to_str(self):
        return self.tokenizer.to_str()

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_gguf_metadata(cls, tokens, merges, token_types, pre, chat_template=None):
        """Build the tokenizer from GGUF metadata.

        Args:
            tokens (list[str]): ``tokenizer.ggml.tokens`` (id = index).
            merges (list[str]): ``tokenizer.ggml.merges``, ``"left right"`` each, in priority order.
            token_types (list[int]): ``tokenizer.ggml.token_type``; control tokens (3) become special tokens.
            pre (str): ``tokenizer.ggml.pre``; only ``"smollm"`` is supported.
            chat_template (str | None): ``tokenizer.chat_template``; must be ChatML (uses ``<|im_start|>``).

        Raises:
            ValueError: another pre-tokenizer, a non-ChatML template, lengths that disagree, a bad merge.
        """
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        if pre not in SUPPORTED_PRE:
            raise ValueError(f"tokenizer: GGUF 'tokenizer.ggml.pre': expected one of {SUPPORTED_PRE}, got {pre!r}")
        if len(token_types) != len(tokens):
            raise ValueError(f"tokenizer: GGUF 'tokenizer.ggml.token_type': expected {len(tokens)} entries (one per "
                             f"token), got {len(token_types)}")
        if chat_template is not None and IM_START not in chat_template:
            raise ValueError("tokenizer: GGUF 'tokenizer.chat_template': expected a ChatML template (with "
                             f"{IM_START}), got another format")
        vocab = {t: i for i, t in enumerate(tokens)}
        pairs = []
        for m in merges:
            left, sep, right = m.partition(" ")
            if not sep or not left or not right:
                raise ValueError(f"tokenizer: GGUF 'tokenizer.ggml.merges': expected 'left right', got {m!r}")
            pairs.append((left, right))
        tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
        # llama.cpp's "smollm" pre-tokenizer: \p{N} (one digit at a time), then the GPT-2 regex over bytes
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        tk.decoder = decoders.ByteLevel()
        specials = [t for t, kind in zip(tokens, token_types) if int(kind) == CONTROL_TOKEN_TYPE]
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        default_system = None
        if chat_template:
            m = _SYSTEM_IN_TEMPLATE.search(chat_template)
            default_system = m.group(1) if m else None
        return cls(tk, default_system)

    @classmethod
    def from_str(cls, text, default_system=None):
        """Rebuild from :meth:`to_str` (the demo's weight cache stores it)."""
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(text), default_system)

    @staticmethod
    def byte_level_vocab():
        """Tokens and token types of the tiny byte-level vocabulary of the seeded random model:
        ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (control), then the 256 byte symbols."""
        from tokenizers import pre_tokenizers

        tokens = [ENDOFTEXT, IM_START, IM_END] + sorted(pre_tokenizers.ByteLevel.alphabet())
        return tokens, [CONTROL_TOKEN_TYPE] * 3 + [1] * 256
