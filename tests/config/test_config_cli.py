"""`llmgw config check|reference|example`, as an operator runs them."""

import textwrap

import pytest

from llmgw.cli.main import main


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_good_file_says_ok(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text("listen: ':8080'\n")
    assert run(["config", "check", str(path)], capsys) == (0, "ok\n", "")


def test_a_misspelt_key_is_named_with_its_file_and_line(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            listen: ':8080'
            store:
              dnss: /var/lib/llmgw/llmgw.db
            router:
              timeouts: {dial: five}
            """
        )
    )
    code, out, err = run(["config", "check", str(path)], capsys)
    assert code == 1
    assert out == ""
    assert err.splitlines() == [
        f"{path}:3: store.dnss: unknown key (did you mean 'dsn'?)",
        f"{path}:5: router.timeouts.dial: expected a duration like 5s, got 'five'",
    ]


def test_a_file_named_agent_yaml_is_checked_as_an_agent(tmp_path, capsys):
    path = tmp_path / "agent.yaml"
    path.write_text("control_planes: [https://10.0.0.140:7443]\nlables: {}\n")
    code, _, err = run(["config", "check", str(path)], capsys)
    assert code == 1
    assert err.strip() == f"{path}:2: lables: unknown key (did you mean 'labels'?)"


def test_agent_flag_checks_any_file_as_an_agent(tmp_path, capsys):
    path = tmp_path / "node.yaml"
    path.write_text("control_planes: [https://10.0.0.140:7443]\n")
    assert run(["config", "check", "--agent", str(path)], capsys)[0] == 0
    code, _, err = run(["config", "check", str(path)], capsys)
    assert code == 1 and "control_planes: unknown key (it belongs in agent.yaml)" in err


def test_a_missing_file_exits_1_naming_it(tmp_path, capsys):
    code, out, err = run(["config", "check", str(tmp_path / "nope.yaml")], capsys)
    assert code == 1
    assert err.startswith(f"{tmp_path / 'nope.yaml'}: no such file")


def test_bad_yaml_exits_1_with_the_line(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text("listen: ':8080'\nrouter: [\n")
    code, _, err = run(["config", "check", str(path)], capsys)
    assert code == 1
    assert f"{path}:" in err and "not valid YAML" in err


@pytest.mark.parametrize("flags, name", [([], "server.yaml"), (["--agent"], "agent.yaml")])
def test_the_example_passes_check(flags, name, tmp_path, capsys):
    code, example, _ = run(["config", "example", *flags], capsys)
    assert code == 0
    assert example.startswith(f"# {name}")
    path = tmp_path / name
    path.write_text(example)
    assert run(["config", "check", str(path)], capsys) == (0, "ok\n", "")


def test_reference_prints_the_markdown(capsys):
    from llmgw.config.reference import reference_markdown

    code, out, _ = run(["config", "reference"], capsys)
    assert code == 0
    assert out == reference_markdown()
    assert out.startswith("# Configuration reference")


def test_config_alone_says_which_subcommands_there_are(capsys):
    code, _, err = run(["config"], capsys)
    assert code == 2
    assert "check, reference or example" in err


def test_a_profile_passing_what_its_engine_does_not_allow_is_refused_with_the_reason(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text(textwrap.dedent("""\
        models:
          - name: qwen
            engine: vllm
            profiles:
              - name: h100
                gpus: 1
                args: [--max-num-seqs, "64", --trust-remote-code]
                env: {VLLM_ATTENTION_BACKEND: FLASHINFER, CUDA_INJECTION64_PATH: /tmp/x.so}
        """))
    code, out, err = run(["config", "check", str(path)], capsys)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{path}: models[0].profiles[0]: args[2]: --trust-remote-code runs code from the model's repository: "
        "not allowed",
        f"{path}: models[0].profiles[0]: env.CUDA_INJECTION64_PATH: CUDA_INJECTION64_PATH loads a library into "
        "the engine: not allowed",
    ]
