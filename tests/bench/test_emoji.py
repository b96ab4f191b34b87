"""bench.emoji on the tiny bundle: both ways measured, emoji taken out all come back."""

from bench import emoji


def test_counts_emoji_kept_and_words_changed_both_ways(tmp_path, tiny_bundle, tiny_sentences,
                                                       capsys):
    src = tmp_path / "plain.en"
    src.write_text("\n".join(tiny_sentences[:6]) + "\n")
    emoji.main(["--bundle", str(tiny_bundle), "--src", str(src)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["as", "taken"]
    assert "emoji kept 6/6  words as without emoji 6/6  chrF against them 100.0" in lines[1]
    sent = emoji.with_emoji(tiny_sentences[:3])
    assert sent[0].endswith(" 😊") and sent[1].startswith("👍 ") and "❤️" in sent[2]
