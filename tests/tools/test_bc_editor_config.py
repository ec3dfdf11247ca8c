"""bc_editor configs that are hostile or broken: one ``ConfigError`` each, read
with bounded memory (issue 16 item 3)."""

import subprocess
import sys

import pytest

from hbir.bc_editor import MAX_CONFIG_BYTES, ConfigError, read_config


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 1000 + "]" * 1000, "JSON nested too deep"),
        (
            '{"remove_fake_quant": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "JSON nested too deep",
        ),
        (
            '{"remove_fake_quant": [' + "9" * 4301 + "]}",
            "a number has more than 4300 digits",
        ),
        ('{"remove_fake_quant": [1]}' + " " * MAX_CONFIG_BYTES, "larger than"),
    ],
)
def test_hostile_config_is_a_config_error(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        read_config(path)  # was RecursionError / ValueError tracebacks
    assert str(info.value).startswith(str(path))


def test_config_from_dev_zero_reads_at_most_the_cap():
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        read_config("/dev/zero")  # was MemoryError


def test_config_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="cannot read: Is a directory"):
        read_config(tmp_path)


def test_bc_editor_reports_a_hostile_config_in_one_line(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("[" * 5000)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "hbir.tools.bc_editor",
            "--bc_path",
            "x.bc",
            "--config_path",
            str(config),
            "--new_bc_path",
            str(tmp_path / "o.bc"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 1
    assert res.stderr.startswith("bc_editor: error: ")
    assert "Traceback" not in res.stderr
