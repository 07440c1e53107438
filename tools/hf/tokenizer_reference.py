#!/usr/bin/env python3
"""HF `tokenizers`' (and tiktoken's) token ids on a generated corpus, for the real-vocabulary tokenizer parity test
(tests/common/text/real_vocab_parity_test.cc).

    python3 tools/hf/tokenizer_reference.py QWEN_TIKTOKEN GPT2_TIKTOKEN SMOLLM2_TOKENIZER_JSON OUT_DIR

QWEN_TIKTOKEN is dashscope's resources/qwen.tiktoken (Qwen2's 151,643 ranks), GPT2_TIKTOKEN openai-whisper's
whisper/assets/gpt2.tiktoken (GPT-2's 50,256 ranks), SMOLLM2_TOKENIZER_JSON the tokenizer.json of the converted
SmolLM2-135M-Instruct directory. Writes into OUT_DIR (assembled in OUT_DIR.tmp and renamed into place):

  corpus.bin                the corpus: a few hundred documents, >= 1 MB of UTF-8 in all, generated
                            deterministically (a seeded PRNG plus the source files of the pinned transformers wheel:
                            no network text). English, code, Chinese, Japanese/Korean and other scripts, decomposed
                            accents (NFC), emoji (ZWJ sequences, skin tones, flags), digits, whitespace runs, special
                            tokens (alone, glued, broken), random code points.
  <vocab>/tokenizer.json    qwen2:   transformers' TikTokenConverter on qwen.tiktoken with Qwen2's split regex and
                                     special tokens <|endoftext|> <|im_start|> <|im_end|> (ids 151643..151645), plus
                                     the NFC normalizer of the published Qwen2 tokenizer.json;
                            gpt2:    TikTokenConverter on gpt2.tiktoken with GPT-2's regex and <|endoftext|> (50256);
                            smollm2: a copy of SMOLLM2_TOKENIZER_JSON.
  <vocab>/ids.bin           HF tokenizers' ids of every document: Tokenizer.encode(doc, add_special_tokens=False)
                            (special added tokens in the text are matched, as they always are in `tokenizers`).
  <vocab>/decode_differs.json  {document index: HF's decode of its ids} for the documents whose decode is not the
                            document (in NFC for qwen2): those with a byte the vocabulary has no symbol for, which
                            became unk_token (SmolLM2's vocabulary lacks 21 byte symbols). Elsewhere decode(ids) is the
                            document.
  summary.json              sizes, token counts, versions, and the tiktoken cross-check.

Binary layout (little-endian): corpus.bin = b"VCORPUS1", u32 ndocs, then per document u32 nbytes + bytes;
ids.bin = b"VTOKIDS1", u32 ndocs, then per document u32 nids + nids x i32.

Checked here, failing the script when they do not hold: HF decodes every document's ids back to the document, and for
qwen2 and gpt2 tiktoken (the same ranks, regex and special tokens; allowed_special="all") gives HF's ids on every
document (for qwen2, on the NFC form of the document, since tiktoken has no normalizer).
"""

import hashlib
import json
import os
import random
import shutil
import struct
import sys
import unicodedata

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GPT2_SPECIAL = ["<|endoftext|>"]
MIN_CORPUS_BYTES = 1_100_000
SEED = 20240611

# ---------------------------------------------------------------------------------------------------------------------
# The corpus.

ENGLISH_WORDS = (
    "the of and to in is was for on that with as by at from it an be this which or are have has not but had they "
    "his her their were been one all would there what so up out if about who get them make can like time just him "
    "know take people into year your good some could see other than then now look only come its over think also back "
    "after use two how our work first well way even new want because any these give day most us model training "
    "reward policy gradient token batch rollout advantage critic actor value loss learning rate optimizer checkpoint "
    "worker controller tensor device memory kernel attention layer embedding vocabulary sequence prompt response "
    "Transformer Qwen Llama GRPO PPO HuggingFace PyTorch NVIDIA CUDA GPU CPU API JSON YAML HTTP gRPC "
    "quickly slowly carefully however therefore although meanwhile nevertheless straightforward "
    "extraordinarily internationalization pneumonoultramicroscopicsilicovolcanoconiosis").split()
CONTRACTIONS = ["it's", "don't", "I'm", "we'll", "they've", "she'd", "you're", "can't", "won't", "IT'S", "DON'T",
                "We'Ll", "THEY'VE", "o'clock", "rock'n'roll", "'tis", "y'all'd've", "Mary's", "James'"]
PUNCT = [".", ",", ";", ":", "!", "?", "...", " -", " --", " —", "?!", ")", "]", "\"", "'", "’", "”"]

CHINESE_WORDS = (
    "我们 你们 他们 今天 明天 昨天 时间 模型 训练 强化 学习 奖励 策略 梯度 数据 集合 问题 答案 计算 数学 "
    "中国 北京 上海 深圳 大学 学生 老师 朋友 工作 公司 技术 发展 经济 社会 文化 历史 语言 文字 汉字 词语 "
    "人工智能 大语言模型 机器学习 深度学习 神经网络 自然语言处理 分词器 词表 编码 解码 "
    "非常 已经 可以 应该 需要 因为 所以 但是 如果 虽然 而且 或者 还是 就是 不是 没有 什么 怎么 为什么 "
    "的 了 是 在 有 和 就 不 人 都 一 一个 上 也 很 到 说 要 去 会 着 看 好 自己 这 那 里 来 对 能 下 过 "
    "龍 體 臺灣 繁體 簡體 學習 語言 電腦 網絡 資料 鬱 齉 龘 𠀀 𪚥 𰻞").split()
CHINESE_PUNCT = ["，", "。", "、", "；", "：", "？", "！", "“", "”", "《", "》", "（", "）", "——", "……", "·", "「", "」"]

OTHER_SCRIPTS = [
    "Привет, мир! Это тестовая строка на русском языке с числами 123 и знаками препинания.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЖИК в тумане.",
    "Γειά σου κόσμε! Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. ΑΒΓΔ αβγδ ς",
    "مرحبا بالعالم! هذه جملة باللغة العربية مع أرقام ١٢٣٤٥ و 678.",
    "שלום עולם! זוהי שורה בעברית עם מספרים 42.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है। क्षत्रिय ज्ञान श्रृंखला १२३",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย ๑๒๓",
    "안녕하세요 세계! 한국어 문장입니다. 가나다라마바사 123",
    "こんにちは世界！これは日本語の文です。カタカナ、ひらがな、漢字。ｶﾀｶﾅ",
    "Tiếng Việt có dấu: Xin chào thế giới, đường phố Hà Nội.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy. Årsredovisning för Ærø.",
    "Ελληνικά, Ქართული ენა, Հայերեն, ትግርኛ, ᏣᎳᎩ, ᠮᠣᠩᠭᠣᠯ, ꦗꦮ, 𐌰𐌱𐌲 (Gothic), 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕯𝖔𝖚𝖇𝖑𝖊",
    "Straße, Maße, Fuß; ﬁ ﬂ ﬀ ligatures; İstanbul ıi; ǅ ǈ ǋ titlecase; ß ẞ",
]
DECOMPOSED = ["e\u0301", "a\u0300", "o\u0308", "u\u0308", "n\u0303", "c\u0327", "A\u030a", "I\u0307",
              "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "\u304b\u3099", "\u30cf\u309a", "e\u0301\u0302",
              "\u0915\u093c", "q\u0307\u0323", "\u212b", "\u2126", "\uf900", "\u1e9b\u0323"]

EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "❤️", "❤", "👍", "👍🏽", "👍🏿", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈",
         "🇨🇳", "🇺🇸", "🇯🇵", "🇩🇪", "1️⃣", "#️⃣", "©️", "™", "🧑🏻‍🔬", "🫠", "🫶🏼", "🐉", "🀄", "🎉", "💯", "☕",
         "⚡", "♻️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "😶‍🌫️", "🙇‍♀️", "🤷🏾‍♂️", "🪐", "🧮"]

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
              "\n ", " \t \n", "\u00a0", "\u00a0\u00a0", "\u3000", "\u2009", "\u200b", "\u2028", "\u2029", "\x0b",
              "\x0c", "\x85", "\u1680", "\u202f", "\u205f", "\ufeff", " " * 17, " " * 64, "\t" * 9, "\n" * 12]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BROKEN_SPECIALS = ["<|im_start|", "<|im_end", "|im_end|>", "<|endoftext", "<|endoftext|>>", "<<|im_end|>",
                   "< |im_start|>", "<|IM_END|>", "<|im_sep|>", "<|fim_prefix|>", "<repo_name>", "<file_sep>"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def english(self, n_sentences):
        out = []
        for _ in range(n_sentences):
            words = [self.r.choice(ENGLISH_WORDS) for _ in range(self.r.randint(3, 22))]
            for i in range(len(words)):
                x = self.r.random()
                if x < 0.06:
                    words[i] = self.r.choice(CONTRACTIONS)
                elif x < 0.09:
                    words[i] = str(self.r.randint(0, 10 ** self.r.randint(1, 7)))
                elif x < 0.11:
                    words[i] = words[i].upper()
                elif x < 0.13:
                    words[i] = "\"" + words[i] + "\""
                elif x < 0.15:
                    words[i] = words[i] + self.r.choice(PUNCT)
            s = " ".join(words)
            s = s[0].upper() + s[1:] + self.r.choice([".", ".", ".", "!", "?", "...", ":", ";"])
            out.append(s)
            out.append(self.r.choice([" ", " ", " ", "  ", "\n", "\n\n", " "]))
        return "".join(out)

    def chinese(self, n_sentences):
        out = []
        for _ in range(n_sentences):
            parts = []
            for _ in range(self.r.randint(4, 30)):
                x = self.r.random()
                if x < 0.08:
                    parts.append(self.r.choice(CHINESE_PUNCT))
                elif x < 0.12:
                    parts.append(str(self.r.randint(0, 99999)))
                elif x < 0.15:
                    parts.append(self.r.choice([" ", "GPU", " AI ", "Qwen2", "PPO", " the model "]))
                elif x < 0.20:
                    parts.append(chr(self.r.randint(0x4E00, 0x9FFF)))
                elif x < 0.21:
                    parts.append(chr(self.r.randint(0x20000, 0x2A6DF)))
                else:
                    parts.append(self.r.choice(CHINESE_WORDS))
            out.append("".join(parts) + self.r.choice(["。", "！", "？", "。\n", "\n"]))
        return "".join(out)

    def other_scripts(self, n):
        out = []
        for _ in range(n):
            x = self.r.random()
            if x < 0.6:
                out.append(self.r.choice(OTHER_SCRIPTS))
            else:
                w = [self.r.choice(ENGLISH_WORDS) for _ in range(self.r.randint(2, 8))]
                for i in range(len(w)):
                    if self.r.random() < 0.5:
                        k = self.r.randint(0, len(w[i]))
                        w[i] = w[i][:k] + self.r.choice(DECOMPOSED) + w[i][k:]
                out.append(" ".join(w))
            out.append(self.r.choice([" ", "\n", " | ", "\t"]))
        return "".join(out)

    def emoji(self, n):
        out = []
        for _ in range(n):
            x = self.r.random()
            if x < 0.4:
                out.append("".join(self.r.choice(EMOJI) for _ in range(self.r.randint(1, 6))))
            elif x < 0.7:
                out.append(self.r.choice(ENGLISH_WORDS) + self.r.choice(EMOJI))
            elif x < 0.85:
                out.append(self.r.choice(EMOJI) + self.r.choice(CHINESE_WORDS))
            else:
                out.append(self.r.choice(EMOJI) * self.r.randint(2, 12))
            out.append(self.r.choice([" ", "", "\n", "  ", "!"]))
        return "".join(out)

    def digits(self, n):
        out = []
        for _ in range(n):
            x = self.r.random()
            if x < 0.3:
                s = str(self.r.randint(0, 10 ** self.r.randint(1, 40)))
            elif x < 0.45:
                s = f"{self.r.uniform(-1e6, 1e6):.{self.r.randint(0, 12)}f}"
            elif x < 0.55:
                s = f"{self.r.randint(0, 10**9):,}"
            elif x < 0.62:
                s = f"{self.r.randint(1900, 2099)}-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}T" \
                    f"{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d}:{self.r.randint(0, 59):02d}Z"
            elif x < 0.68:
                s = f"+1 ({self.r.randint(100, 999)}) {self.r.randint(100, 999)}-{self.r.randint(1000, 9999)}"
            elif x < 0.74:
                s = f"{self.r.randint(0, 99)} + {self.r.randint(0, 99)} = ?\n#### {self.r.randint(0, 198)}"
            elif x < 0.80:
                s = "".join(chr(0x0660 + self.r.randint(0, 9)) for _ in range(self.r.randint(1, 8)))
            elif x < 0.86:
                s = "".join(chr(0xFF10 + self.r.randint(0, 9)) for _ in range(self.r.randint(1, 8)))
            elif x < 0.90:
                s = self.r.choice(["²", "³", "¹", "½", "¾", "Ⅻ", "ⅷ", "①", "⑳", "𝟙𝟚𝟛", "٣", "߁", "६", "๓"])
            elif x < 0.95:
                s = "0x" + "".join(self.r.choice("0123456789abcdefABCDEF") for _ in range(self.r.randint(1, 16)))
            else:
                s = f"{self.r.random():.3e}"
            out.append(s)
            out.append(self.r.choice([" ", ", ", "\n", "", "; ", " x ", "/", "."]))
        return "".join(out)

    def whitespace(self, n):
        out = []
        for _ in range(n):
            x = self.r.random()
            if x < 0.5:
                out.append(self.r.choice(WHITESPACE))
            elif x < 0.8:
                out.append(self.r.choice(ENGLISH_WORDS))
            elif x < 0.9:
                out.append(" " * self.r.randint(1, 80))
            else:
                out.append("".join(self.r.choice(WHITESPACE[:14]) for _ in range(self.r.randint(2, 10))))
        return "".join(out)

    def specials(self, n_turns):
        out = []
        for _ in range(n_turns):
            x = self.r.random()
            if x < 0.45:
                role = self.r.choice(["system", "user", "assistant", "tool"])
                body = self.english(self.r.randint(1, 3)) if self.r.random() < 0.7 else self.chinese(1)
                out.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
            elif x < 0.6:
                out.append("".join(self.r.choice(SPECIALS) for _ in range(self.r.randint(2, 5))))
            elif x < 0.75:
                w = self.r.choice(ENGLISH_WORDS)
                k = self.r.randint(0, len(w))
                out.append(w[:k] + self.r.choice(SPECIALS) + w[k:] + self.r.choice(["", " ", "\n"]))
            elif x < 0.9:
                out.append(self.r.choice(BROKEN_SPECIALS) + self.r.choice(["", " ", "x", "\n"]))
            else:
                out.append(self.r.choice(WHITESPACE) + self.r.choice(SPECIALS) + self.r.choice(WHITESPACE))
        return "".join(out)

    def random_code_points(self, n):
        out = []
        for _ in range(n):
            x = self.r.random()
            if x < 0.4:
                c = self.r.randint(0x20, 0x7E)
            elif x < 0.7:
                c = self.r.randint(0xA0, 0x2FFF)
            elif x < 0.9:
                c = self.r.randint(0x3000, 0xFFFD)
            else:
                c = self.r.randint(0x10000, 0x10FFFF)
            if 0xD800 <= c <= 0xDFFF:
                continue
            out.append(chr(c))
        return "".join(out)

    def markup(self, n):
        items = ['{"key": "value", "n": 12, "list": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
                 "<div class=\"x\">Hello &amp; <b>world</b></div>", "| col | col2 |\n|-----|------|\n| 1 | 2 |",
                 "```python\nprint('hi')\n```", "**bold** _it_ `code` [link](http://example.com/a?b=c&d=e#f)",
                 "SELECT * FROM t WHERE x >= 10 AND y <> 'z';", "a==b!=c<=d>=e->f=>g::h&&i||j",
                 "!!!???...---===+++***###@@@$$$%%%^^^&&&", "C:\\Users\\name\\file.txt", "~/.config/x.yaml:42:7",
                 "\\begin{equation} \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
                 "x² + y² = z²; ∀x ∈ ℝ: x ≥ 0 ⇒ √x ∈ ℝ; ∑ᵢ aᵢ ≤ ∞", "«quoted» „German“ ‹single› 'ascii' \"double\""]
        return "\n".join(self.r.choice(items) for _ in range(n)) + "\n"


def source_files():
    """The pinned transformers wheel's own sources: real code with English docstrings."""
    import transformers
    base = os.path.dirname(transformers.__file__)
    names = ["models/llama/modeling_llama.py", "models/qwen2/modeling_qwen2.py", "models/qwen2/tokenization_qwen2.py",
             "models/gpt2/modeling_gpt2.py", "models/gpt2/tokenization_gpt2.py", "convert_slow_tokenizer.py",
             "generation/utils.py"]
    out = []
    for n in names:
        with open(os.path.join(base, n), encoding="utf-8") as f:
            out.append(f.read())
    return out


def make_corpus():
    g = Gen(SEED)
    docs = []
    # Code, cut at line boundaries into documents of 200 B .. 12 KB.
    for text in source_files():
        lines = text.splitlines(keepends=True)
        i = 0
        while i < len(lines):
            j, size, limit = i, 0, g.r.randint(100, 6000)
            while j < len(lines) and size < limit:
                size += len(lines[j])
                j += 1
            docs.append("".join(lines[i:j]))
            i = j
    makers = [lambda: g.english(g.r.randint(1, 30)), lambda: g.chinese(g.r.randint(1, 20)),
              lambda: g.other_scripts(g.r.randint(2, 15)), lambda: g.emoji(g.r.randint(3, 40)),
              lambda: g.digits(g.r.randint(3, 60)), lambda: g.whitespace(g.r.randint(5, 100)),
              lambda: g.specials(g.r.randint(1, 10)), lambda: g.random_code_points(g.r.randint(5, 200)),
              lambda: g.markup(g.r.randint(1, 10))]
    weights = [22, 16, 8, 6, 8, 6, 8, 3, 4]
    total = sum(len(d.encode("utf-8")) for d in docs)
    while total < MIN_CORPUS_BYTES:
        if g.r.random() < 0.5:  # one kind of text
            doc = g.r.choices(makers, weights)[0]()
        else:  # several kinds back to back: boundaries between scripts, digits, whitespace and special tokens
            doc = "".join(g.r.choices(makers, weights)[0]() for _ in range(g.r.randint(2, 6)))
        docs.append(doc)
        total += len(doc.encode("utf-8"))
    return docs


# ---------------------------------------------------------------------------------------------------------------------
# Tokenizers and ids.

def write_corpus(path, docs):
    with open(path, "wb") as f:
        f.write(b"VCORPUS1" + struct.pack("<I", len(docs)))
        for d in docs:
            b = d.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)


def write_ids(path, all_ids):
    import numpy as np
    with open(path, "wb") as f:
        f.write(b"VTOKIDS1" + struct.pack("<I", len(all_ids)))
        for ids in all_ids:
            f.write(struct.pack("<I", len(ids)) + np.asarray(ids, dtype="<i4").tobytes())


def tiktoken_tokenizer_json(tiktoken_file, pattern, specials, nfc):
    from transformers.convert_slow_tokenizer import TikTokenConverter
    tok = TikTokenConverter(vocab_file=tiktoken_file, pattern=pattern, additional_special_tokens=specials).converted()
    tj = json.loads(tok.to_str())
    if nfc:
        tj["normalizer"] = {"type": "NFC"}
    return tj


def tiktoken_encoding(name, tiktoken_file, pattern, specials):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    ranks = load_tiktoken_bpe(tiktoken_file)
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens={s: len(ranks) + i for i, s in enumerate(specials)})


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    qwen_file, gpt2_file, smol_json, out_dir = sys.argv[1:5]
    import tiktoken
    import tokenizers
    import transformers
    from tokenizers import Tokenizer

    docs = make_corpus()
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write_corpus(os.path.join(tmp, "corpus.bin"), docs)
    corpus_bytes = sum(len(d.encode("utf-8")) for d in docs)

    with open(smol_json, encoding="utf-8") as f:
        smol_tj = json.load(f)
    vocabs = {
        "qwen2": (tiktoken_tokenizer_json(qwen_file, QWEN2_PATTERN, QWEN2_SPECIAL, nfc=True),
                  tiktoken_encoding("qwen2", qwen_file, QWEN2_PATTERN, QWEN2_SPECIAL), True),
        "gpt2": (tiktoken_tokenizer_json(gpt2_file, GPT2_PATTERN, GPT2_SPECIAL, nfc=False),
                 tiktoken_encoding("gpt2", gpt2_file, GPT2_PATTERN, GPT2_SPECIAL), False),
        "smollm2": (smol_tj, None, False),
    }
    summary = {"corpus_bytes": corpus_bytes, "documents": len(docs), "seed": SEED,
               "corpus_sha256": hashlib.sha256(open(os.path.join(tmp, "corpus.bin"), "rb").read()).hexdigest(),
               "tokenizers_version": tokenizers.__version__, "tiktoken_version": tiktoken.__version__,
               "transformers_version": transformers.__version__, "vocabularies": {}}
    for name, (tj, enc, nfc) in vocabs.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        text = json.dumps(tj, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        tok = Tokenizer.from_str(text)
        all_ids = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        # Where HF's decode is not the document (in NFC when the vocabulary normalizes): only where a byte has no
        # symbol in the vocabulary and became unk_token (SmolLM2 lacks 21 of the 256 byte symbols).
        unk = tj["model"].get("unk_token")
        unk_id = tok.token_to_id(unk) if unk else None
        decode_differs = {}
        for i, (doc, ids) in enumerate(zip(docs, all_ids)):
            back = tok.decode(ids, skip_special_tokens=False)
            if back != (unicodedata.normalize("NFC", doc) if nfc else doc):
                if unk_id is None or unk_id not in ids:
                    sys.exit(f"{name}: HF decode of document {i} is not the document" + (" in NFC" if nfc else ""))
                decode_differs[str(i)] = back
        with open(os.path.join(d, "decode_differs.json"), "w", encoding="utf-8") as f:
            json.dump(decode_differs, f, ensure_ascii=False)
        write_ids(os.path.join(d, "ids.bin"), all_ids)
        info = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "normalizer_nfc": nfc,
                "tokens": sum(len(x) for x in all_ids), "documents_decoding_to_other_text": len(decode_differs)}
        if enc is not None:
            mismatches = [i for i, (doc, ids) in enumerate(zip(docs, all_ids))
                          if enc.encode(unicodedata.normalize("NFC", doc) if nfc else doc, allowed_special="all") != ids]
            if mismatches:
                sys.exit(f"{name}: tiktoken and HF tokenizers differ on {len(mismatches)} documents, e.g. "
                         f"{mismatches[:5]}")
            info["tiktoken_documents_identical"] = len(docs)
        summary["vocabularies"][name] = info
        print(f"{name}: {info}", file=sys.stderr)
    with open(os.path.join(tmp, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"wrote {out_dir}: {len(docs)} documents, {corpus_bytes} bytes")


if __name__ == "__main__":
    main()
