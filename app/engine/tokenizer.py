"""Text <-> ids for the engine, in the two layouts a bundle may carry.

- JointTokenizer: one SentencePiece model for both sides; ids are its piece ids (our own models).
- SplitTokenizer: a source and a target SentencePiece model over a vocabulary that maps pieces
  to ids (vocab.json): Marian's shared map, or an imported CTranslate2 model's token lists. The
  source model cuts the input into pieces, the vocabulary numbers them (unknown pieces become
  unk), and the target model joins the output pieces back into text.

Both encode without BOS/EOS and decode ids that the caller has stripped of special tokens;
`add_source_eos` says whether the engine ends each source with EOS (CTranslate2 models say so
in their config.json: Argos Translate's do not).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import sentencepiece as spm

# a word as people type it in a sentence: letters, inner apostrophes or hyphens ("don't",
# "well-known"), a mark at its end; digits, underscores, slashes and the like make it code
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*[,.!?;:]?")
_QUOTES = "\"'“”„‘’‚«»()[]"  # around a word in a sentence: (SEE, "NEXT",
SENTENCE_WORDS = 3  # fewer words are a label or a term ("open", "file name"), kept as typed
# the pronoun "i" alone or before an apostrophe ("i", "i'm", "i've"): English writes it "I"
_PRONOUN_I = re.compile(r"(?<![^\W\d_])i(?![^\W\d_])")
SPACE = "\u2581"  # SentencePiece's mark of a space


def capitalize_lowercase(text: str) -> str:
    """English text typed all in lower case that reads as a sentence (SENTENCE_WORDS words or
    more, each a word of letters, the first not "to") with its first letter and the pronoun
    "i" capitalised; any other text as it is. Users type "where is the station" into a chat
    box, and a model trained on written text translates the capitalised sentence much better;
    lower-case labels, commands and terms stay as they are, since their case is part of what
    they say. An infinitive ("to take legal measures") is a term looked up, not a sentence:
    capitalised, the model reads it as a clause of purpose ("Um ... zu ...")."""
    words = text.split()
    if (len(words) < SENTENCE_WORDS or words[0] == "to" or any(c.isupper() for c in text)
            or not all(_WORD.fullmatch(w) for w in words)):
        return text
    return _sentence_case(text)


def in_capitals(text: str) -> bool:
    """Whether text is a sentence written all in capitals ("PLEASE CLOSE THE DOOR."):
    SENTENCE_WORDS words or more with letters, each a word of capitals (numbers and masks
    between them allowed), no lower-case letter anywhere. Shorter ones ("USB", "SAVE AS") are
    acronyms and labels, and code ("NAME|#N VOLUME", "%S") says what it says: kept as typed."""
    words = [w.strip(_QUOTES).rstrip(",.!?;:…").strip(_QUOTES) for w in text.split()
             if any(c.isalpha() for c in w)]
    return (len(words) >= SENTENCE_WORDS and not any(c.islower() for c in text)
            and all(_WORD.fullmatch(w) and any(c.isupper() for c in w) for w in words))


def as_written(text: str) -> tuple[str, bool]:
    """(text as a model trained on written text reads it best, whether its translation is to be
    written in capitals): a text in capitals (in_capitals) in sentence case, its translation
    given back in capitals (a model that never saw a shouted sentence garbles one: "PLEASE CLOSE
    DIE DOOR."); a sentence typed in lower case capitalised (capitalize_lowercase)."""
    if in_capitals(text):
        return _sentence_case(text.lower()), True
    return capitalize_lowercase(text), False


def _sentence_case(text: str) -> str:
    """A lower-case text with its first letter and the pronoun "i" capitalised."""
    first = next(i for i, c in enumerate(text) if c.isalpha())
    return _PRONOUN_I.sub("I", text[:first] + text[first].upper() + text[first + 1:])


def is_symbol(c: str) -> bool:
    """Whether c is a symbol or a mark of the kind the engine may mask for a model that does
    not read it (app.engine.translator): beyond ASCII, Unicode's symbols (S) and other
    punctuation (Po); quotes, brackets and dashes are left to the model, which writes them as
    the target language sets them ("„...“", "»...«", "–")."""
    return not c.isascii() and (unicodedata.category(c)[0] == "S"
                                or unicodedata.category(c) == "Po")


def one_final_period(text: str) -> str:
    """text with one period where it ends in exactly two after a word: a sentence ending in an
    ordinal or an abbreviation takes no period of its own ("am 5.", "usw."), but the model
    learned the ordinal's period and the sentence's separately and writes both ("am 5..").
    An ellipsis, a range ("1..2") and text of marks alone stay as they are."""
    body = text.rstrip()
    if body.endswith("..") and not body.endswith("...") and body[:-2].strip(". "):
        return body[:-1] + text[len(body):]
    return text


_FINAL_MARKS = re.compile(r"[!?]+(?=\s*$)")


def final_marks(text: str) -> str:
    """The run of "!" and "?" a text ends with ("" for none)."""
    found = _FINAL_MARKS.search(text)
    return found.group() if found else ""


def marks_as_source(text: str, marks: str) -> str:
    """text ending in the source's final run of "!" and "?" (`marks`, final_marks) where both
    end in one and either run is longer than a mark: the model wrote a single mark for the
    source's "!!!" or "??" ("Thank you!!!" -> "Danke!") and doubled a long one."""
    found = _FINAL_MARKS.search(text) if marks else None
    if found is None or found.group() == marks or max(len(marks), len(found.group())) < 2:
        return text
    return text[: found.start()] + marks + text[found.end() :]


def decode_with_unknowns(ids: list[int], unk_id: int, unknown: list[str] | tuple[str, ...],
                         decode, piece) -> str:
    """ids decoded with each unknown piece written as the next of `unknown` (the source's
    unknown pieces, in order; one past them as nothing), not as SentencePiece's " ⁇ ": a
    character the vocabulary lacks ("ï", "£", an emoji) comes back as it was sent. The known
    pieces between them are decoded by `decode`, each run after the first with the spaces its
    leading pieces stand for (`piece`: an id's piece)."""
    parts: list[str] = []
    run: list[int] = []
    spare = iter(unknown)

    def flush() -> None:
        if run:
            lead = "".join(piece(i) for i in run[:4])
            spaces = len(lead) - len(lead.lstrip(SPACE)) if parts else 0
            parts.append(" " * spaces + decode(run))
            run.clear()

    for i in ids:
        if i == unk_id:
            flush()
            parts.append(next(spare, ""))
        else:
            run.append(i)
    flush()
    return "".join(parts)


class Form(NamedTuple):
    """A word of the source as the model reads it and as it was written ("m2", "m²"), and its
    runs of characters read without a letter or digit, each (as read, as written), where the
    source reads so nowhere else ("..." for "…")."""

    read: str
    written: str
    marks: tuple[tuple[str, str], ...]


def written_forms(text: str, plain: Callable[[str], str]) -> tuple[Form, ...]:
    """The words of text (runs of letters, digits and characters the tokenizer reads otherwise)
    that hold a character the tokenizer reads otherwise: `plain(c)` is how it reads c (its
    normalization: "²" -> "2", "™" -> "TM", "…" -> "...", a no-break space -> " "). A space
    read as a space joins the words on its sides ("25\u00a0kg" is read "25 kg"); a character
    read as nothing parts them."""
    if text.isascii():  # the normalization keeps every ASCII letter, digit and mark
        return ()

    def kind(c: str) -> int:  # 0 between words, 1 a word's own, 2 read otherwise, 3 a space
        if c.isascii() or (p := plain(c)) == c:
            return int(c.isalnum())
        return 3 if p == " " else 2 if p else 0

    kinds = [kind(c) for c in text]
    reads = [plain(c) if k > 1 else c for c, k in zip(text, kinds, strict=True)]
    words, marks = [], []
    for m in re.finditer(r"[123]+", "".join(map(str, kinds))):
        if not re.search("[23]", m.group()) or not re.search("[12]", m.group()):
            continue  # nothing read otherwise, or spaces alone
        start, end = m.span()
        runs = [(r.start() + start, r.end() + start)
                for r in re.finditer("2+", m.group())]
        marks.append([("".join(reads[a:b]), text[a:b]) for a, b in runs
                      if not any(c.isalnum() for c in "".join(reads[a:b]))])
        words.append(("".join(reads[start:end]), text[start:end]))
    read_text = "".join(reads)
    counts: dict[str, int] = {}
    for read, _ in (mark for found in marks for mark in found):
        counts[read] = counts.get(read, 0) + 1
    return tuple(Form(read, written, tuple(mark for mark in found
                                           if read_text.count(mark[0]) == counts[mark[0]]))
                 for (read, written), found in zip(words, marks, strict=True))


def written_back(text: str, forms: tuple[Form, ...]) -> str:
    """text (a translation) with the source's words (`forms`) written back as the source wrote
    them where it has them as the model reads them, each once and in order, whole words
    first; then, for a word not found, its marks ("..." -> "…"), wherever they are."""
    if not forms:
        return text
    taken = bytearray(len(text))
    places: list[tuple[int, int, str]] = []
    after: dict[tuple[str, bool], int] = {}  # where a read form's next search starts

    def claim(read: str, written: str, whole: bool) -> bool:
        for m in re.compile(re.escape(read)).finditer(text, after.get((read, whole), 0)):
            start, end = m.span()
            if whole and ((read[0].isalnum() and start and text[start - 1].isalnum())
                          or (read[-1].isalnum() and end < len(text) and text[end].isalnum())):
                continue
            if not any(taken[start:end]):
                taken[start:end] = b"\1" * (end - start)
                places.append((start, end, written))
                after[read, whole] = end
                return True
        after[read, whole] = len(text)
        return False

    missed = [form for form in forms if not claim(form.read, form.written, whole=True)]
    for form in missed:
        for read, written in form.marks:
            claim(read, written, whole=False)
    out, at = [], 0
    for start, end, written in sorted(places):
        out += [text[at:start], written]
        at = end
    return "".join(out) + text[at:]


def _read(sp: spm.SentencePieceProcessor, c: str) -> str:
    """The character c as the SentencePiece model reads it (its normalization); " " for a
    space (which the normalization drops at a text's ends: so c is read between two letters)."""
    read = sp.normalize(c).replace(SPACE, " ").strip()
    return read or (" " if sp.normalize(f"x{c}x") == f"{SPACE}x{SPACE}x" else "")


def _surface(piece) -> str:
    """A piece's text as it was in the input, without the space its mark stands for."""
    return piece.surface[1:] if piece.piece.startswith(SPACE) else piece.surface


class JointTokenizer:
    add_source_eos = True

    def __init__(self, model_file: str | Path) -> None:
        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.plain = functools.lru_cache(maxsize=1 << 16)(lambda c: _read(self.sp, c))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def piece_id(self, piece: str) -> int | None:
        """The id of a special piece, or None when the model has none (SentencePiece: -1)."""
        found = {
            "pad": self.sp.pad_id(),
            "bos": self.sp.bos_id(),
            "eos": self.sp.eos_id(),
            "unk": self.sp.unk_id(),
        }[piece]
        return None if found < 0 else found

    def encode(self, texts: list[str]) -> list[list[int]]:
        # one call per text: SentencePiece encodes a list on a pool of threads that it starts
        # for each call, which costs far more than encoding a short text
        return [self.sp.encode(text) for text in texts]

    def name_pieces(self) -> tuple[frozenset[int], frozenset[int]]:
        """(the ids of the pieces with a capital letter or a digit, those of the pieces that
        begin a word): what app.engine.rerank.name_pieces needs to find a source's names and
        numbers."""
        pieces = [(i, self.sp.id_to_piece(i)) for i in range(self.sp.get_piece_size())
                  if not (self.sp.is_control(i) or self.sp.is_unknown(i))]
        return (frozenset(i for i, p in pieces if any(c.isupper() or c.isdigit() for c in p)),
                frozenset(i for i, p in pieces if p.startswith(SPACE)))

    def unknown_pieces(self, text: str) -> list[str]:
        """The text of each of text's pieces that the vocabulary lacks, in order."""
        unk = self.sp.unk_id()
        return [_surface(p) for p in self.sp.encode(text, return_type="proto").pieces
                if p.id == unk]

    def decode(self, ids: list[int], unknown: list[str] | tuple[str, ...] | None = None) -> str:
        """ids -> text; with `unknown` (the source's unknown pieces), the unknown pieces as
        decode_with_unknowns writes them, else as SentencePiece does."""
        unk = self.sp.unk_id()
        if unknown is None or unk < 0 or unk not in ids:
            return self.sp.decode(ids)
        return decode_with_unknowns(ids, unk, unknown, self.sp.decode, self.sp.id_to_piece)


SPECIAL_PIECES = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
CT2_VOCABULARY = "ctranslate2"  # the `format` of a vocabulary file in CTranslate2's order


def first_ids(pieces: list[str]) -> dict[str, int]:
    """piece -> its first id (a repeated piece keeps its first, as CTranslate2 maps it)."""
    ids: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        ids.setdefault(piece, i)
    return ids


class SplitTokenizer:
    """Source/target SentencePiece models (serialized protos) and a vocabulary that numbers the
    pieces. The vocabulary is Marian's shared piece -> id map, or an imported CTranslate2
    model's token lists (`{"format": "ctranslate2", "source_tokens": [...], "target_tokens":
    [...], "special_tokens": {"pad", "bos", "eos", "unk"}, "add_source_eos": bool,
    "detokenize": "argos" | "sentencepiece"}`): ids are positions in those lists, pieces
    are mapped by their strings, and a piece the list lacks is unknown, as in CTranslate2."""

    def __init__(self, source: bytes, target: bytes, vocab: dict) -> None:
        if vocab.get("format") == CT2_VOCABULARY:
            source_pieces, target_pieces = vocab["source_tokens"], vocab["target_tokens"]
            self.specials = {**SPECIAL_PIECES, **vocab.get("special_tokens", {})}
            self.add_source_eos = bool(vocab.get("add_source_eos", False))
            self.argos_detokenize = vocab.get("detokenize") == "argos"
        else:
            ids = sorted(vocab.values())
            if ids != list(range(len(ids))):
                raise ValueError("the vocabulary's ids must be 0 .. size-1, each once")
            source_pieces = [""] * len(ids)  # id -> piece
            for piece, i in vocab.items():
                source_pieces[i] = piece
            target_pieces = source_pieces
            self.specials = dict(SPECIAL_PIECES)
            self.add_source_eos, self.argos_detokenize = True, False
        self.spec = vocab  # as given: what a bundle's vocabulary file holds
        self.source = spm.SentencePieceProcessor(model_proto=source)
        self.plain = functools.lru_cache(maxsize=1 << 16)(lambda c: _read(self.source, c))
        self.target = spm.SentencePieceProcessor(model_proto=target)
        self.vocab = first_ids(source_pieces)  # source piece -> id
        self.target_ids = first_ids(target_pieces)
        self.pieces = list(target_pieces)  # target id -> piece
        if self.specials["unk"] not in self.vocab:
            raise ValueError(f"the vocabulary has no {self.specials['unk']} piece")
        self.unk_id = self.vocab[self.specials["unk"]]

    @classmethod
    def from_files(cls, source: str | Path, target: str | Path, vocab: str | Path):
        mapping = json.loads(Path(vocab).read_text(encoding="utf-8"))
        if not isinstance(mapping, dict):
            raise ValueError("the vocabulary must be a JSON object of piece -> id")
        return cls(Path(source).read_bytes(), Path(target).read_bytes(), mapping)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def piece_id(self, piece: str) -> int | None:
        return self.target_ids.get(self.specials[piece])

    def encode(self, texts: list[str]) -> list[list[int]]:
        rows = [self.source.encode(text, out_type=str) for text in texts]  # as JointTokenizer
        return [[self.vocab.get(p, self.unk_id) for p in row] for row in rows]

    def unknown_pieces(self, text: str) -> list[str]:
        """The text of each of text's pieces that the vocabulary lacks, in order."""
        return [_surface(p) for p in self.source.encode(text, return_type="proto").pieces
                if p.piece not in self.vocab]

    def decode(self, ids: list[int], unknown: list[str] | tuple[str, ...] | None = None) -> str:
        """As JointTokenizer.decode."""
        unk = self.target_ids.get(self.specials["unk"])
        if unknown is not None and unk is not None and unk in ids:
            return decode_with_unknowns(ids, unk, unknown, self._decode,
                                        self.pieces.__getitem__)
        return self._decode(ids)

    def _decode(self, ids: list[int]) -> str:
        text = self.target.decode_pieces([self.pieces[i] for i in ids])
        if self.argos_detokenize:
            # Argos Translate's SentencePieceTokenizer.decode, then translate's removal of the
            # leading space its tokenizer leaves
            text = text.replace("\u2581", " ").replace("_", " ")
            text = text[1:] if text.startswith(" ") else text
        return text
