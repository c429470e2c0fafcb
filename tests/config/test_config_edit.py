"""Editing server.yaml in place: values changed where they stand, comments kept above the keys they describe."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmgw.config.edit import EditError, check_text, edit_text, write_atomically
from llmgw.config.errors import ConfigError
from llmgw.config.schema import PathError, keys_of, parse_path, template_of
from llmgw.config.server import ServerConfig

TEXT = """\
# llmgw server configuration
listen: ":8080"   # the client API

# Where the store lives
store:
  dsn: /var/lib/llmgw/llmgw.db  # sqlite
router:
  retries:
    attempts: 3   # tries
# The admission queue
admission:
  max_wait: 30s
control:
  backoff: {initial: 2s, max: 30s}
models:
  - name: a   # first
    engine: sim
    profiles:
      - name: cpu
    scaling:
      min: 1
  # second model
  - name: b
    engine: sim
    profiles:
      - name: cpu
# trailing comment
"""


def test_a_value_changes_where_it_stands_with_its_quotes_and_comment():
    out = edit_text(TEXT, {"listen": ":8081", "router.retries.attempts": 5})
    assert out == TEXT.replace('":8080"', '":8081"').replace("attempts: 3", "attempts: 5")


def test_a_new_key_goes_at_the_end_of_its_section_and_comments_stay_above_the_next_key():
    out = edit_text(TEXT, {"router.timeouts.dial": "7s", "mirror.url": "http://m:8081"})
    assert "    attempts: 3   # tries\n  timeouts:\n    dial: 7s\n# The admission queue\nadmission:" in out
    assert out.endswith("      - name: cpu\nmirror:\n  url: http://m:8081\n# trailing comment\n")
    check_text(out, "server.yaml")


def test_a_key_taken_out_takes_empty_sections_with_it_and_leaves_the_comments_after_it():
    out = edit_text(TEXT, None, ["router.retries.attempts"])
    assert "router" not in out and "# tries" not in out
    assert "  dsn: /var/lib/llmgw/llmgw.db  # sqlite\n# The admission queue\nadmission:" in out
    out = edit_text(TEXT, None, ["models[0].scaling.min"])
    assert "scaling" not in out and "      - name: cpu\n  # second model\n  - name: b" in out
    out = edit_text(TEXT, None, ["listen"])
    assert out.startswith("# llmgw server configuration\n\n# Where the store lives\nstore:")
    assert edit_text(TEXT, None, ["mirror.url"]) == TEXT  # not there: nothing to do


def test_entries_are_removed_by_their_index_in_the_file_highest_first():
    out = edit_text(TEXT, None, ["models[0]", "models[1]"])
    assert "name: a" not in out and "name: b" not in out and "models: []" in out
    out = edit_text(TEXT, {"models[0].scaling.max": 2}, ["models[0]"])
    assert "name: a" not in out and "  # second model\n  - name: b" in out


def test_a_whole_list_is_merged_so_the_untouched_parts_keep_their_comments():
    out = edit_text(TEXT, {"models": [{"name": "a", "engine": "sim", "profiles": [{"name": "cpu"}]},
                                      {"name": "b", "engine": "sim", "profiles": [{"name": "cpu", "cores": 2}]},
                                      {"name": "c", "engine": "sim", "profiles": [{"name": "cpu"}]}]})
    assert "  - name: a   # first" in out and "scaling" not in out and "# second model" in out
    assert "        cores: 2\n  - name: c" in out and out.endswith("# trailing comment\n")
    check_text(out, "server.yaml")


def test_flow_style_stays_flow():
    out = edit_text(TEXT, {"control.backoff.max": "1m"})
    assert "  backoff: {initial: 2s, max: 1m}\n" in out


def test_hidden_secrets_keep_the_files_and_cannot_be_made_up():
    text = "models:\n  - name: a\n    endpoints:\n      - url: https://x\n        api_key: sk-1  # key\n"
    assert edit_text(text, {"models[0].endpoints[0].api_key": "***"}) == text
    out = edit_text(text, {"models[0].endpoints": [{"url": "https://y", "api_key": "***"}]})
    assert "api_key: sk-1  # key" in out and "https://y" in out
    with pytest.raises(EditError, match=r"models\[0\].endpoints\[1\].api_key: \*\*\* stands for a secret"):
        edit_text(text, {"models[0].endpoints[1]": {"url": "https://z", "api_key": "***"}})


@pytest.mark.parametrize(("change", "words"), [
    ({"router.retries.atempts": 1}, "router.retries.atempts: unknown key (did you mean 'attempts'?)"),
    ({"listen.port": 1}, "listen: a text holds no keys; set it as a whole"),
    ({"models[4]": {"name": "x"}}, "models[4]: the file's list has 2 entries; a new one is [2]"),
    ({"models.name": "x"}, "models: a list; give an entry's index, like models[0]"),
    ({"router..x": 1}, "'router..x' is not a key's path"),
])
def test_a_path_that_names_no_key_is_refused_naming_it(change, words):
    with pytest.raises(PathError) as caught:
        edit_text(TEXT, change)
    assert words in str(caught.value)


def test_an_empty_file_or_one_of_comments_only_gets_the_key_after_its_comments():
    assert edit_text("", {"listen": ":1"}) == "listen: :1\n"
    assert edit_text("# nothing yet\n", {"router.retries.attempts": 1}) == (
        "# nothing yet\nrouter:\n  retries:\n    attempts: 1\n")


def test_a_file_that_is_not_yaml_is_refused_with_the_loaders_words():
    with pytest.raises(ConfigError, match="not valid YAML"):
        edit_text("router: [\n", {"listen": ":1"})


def test_the_config_example_survives_a_change_untouched_elsewhere():
    example = subprocess.run([sys.executable, "-m", "llmgw", "config", "example"], capture_output=True,
                             text=True, check=True).stdout
    out = edit_text(example, {"router.timeouts.idle": "2m"})
    assert out == example.replace("    idle: 1m\n", "    idle: 2m\n")


def test_write_atomically_keeps_the_mode_and_follows_a_link(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("a: 1\n")
    os.chmod(real, 0o600)
    link = tmp_path / "server.yaml"
    link.symlink_to(real)
    write_atomically(link, "a: 2\n")
    assert link.is_symlink() and real.read_text() == "a: 2\n" and os.stat(real).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real.yaml", "server.yaml"]


def test_the_schema_lists_every_key_the_reference_does():
    keys = {k.path: k for k in keys_of(ServerConfig)}
    assert keys["router.timeouts.dial"].kind == "duration" and keys["router.timeouts.dial"].default == "5s"
    assert keys["models[].scaling.min"].template and keys["models"].kind == "blocks"
    assert keys["guard.mode"].choices == ("enforce", "shadow", "off")
    assert keys["store.dsn"].secret and keys["auth.oidc.client_secret"].nullable
    assert template_of(parse_path('models[2].profiles[0].env["A.B"]')) == "models[].profiles[].env.A.B"
