"""The requirements map: every testable statement of seed 000, sections 2, 3, 5, 6 and 7.

Each row paraphrases one statement of the seed (/work/shared/seeds/000_*.txt), with
the gaps filled by DESIGN.md section 9, and lists the pytest node ids of the tests
that prove it. An empty ``tests`` tuple means the requirement has no test yet.

Ids are stable: ``<seed>-<section>.<running number>``. Never renumber a row; a
new row takes the next free number in its section, and a dropped row leaves a gap.

To mark a requirement covered, add node ids such as
``"tests/test_manifest.py::test_unknown_keys_are_refused_at_every_level"`` or
``"tests/test_ledger.py::TestCompaction::test_released_runs_are_dropped[start]"``.
``tests/test_requirements_map.py`` checks that every listed test exists.

Run ``python -m tests.requirements`` from the project root for the coverage table.
"""

# One requirement per line, however long.
# ruff: noqa: E501
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

SECTIONS = ("2", "3", "5", "6", "7")
SECTION_TITLES = {
    "2": "manifest",
    "3": "protocol",
    "5": "calling a tool",
    "6": "quotas across calls",
    "7": "crashes and restarts",
}
ID_PATTERN = re.compile(r"^(?P<seed>\d{3})-(?P<section>\d+)\.(?P<number>\d{2,})$")


@dataclass(frozen=True)
class Requirement:
    id: str
    seed: str
    section: str
    text: str
    tests: tuple[str, ...] = ()


def _r(id: str, text: str, tests: tuple[str, ...] = ()) -> Requirement:
    """A row: seed and section are read from the id, so they cannot disagree with it."""
    match = ID_PATTERN.match(id)
    seed, section = (match["seed"], match["section"]) if match else ("", "")
    return Requirement(id=id, seed=seed, section=section, text=text, tests=tests)


REQUIREMENTS: tuple[Requirement, ...] = (
    # ------------------------------------------------------------------ 2. The manifest
    _r("000-2.01", "The manifest is a single JSON file named on the command line; the server reads it exactly once, at start, and later edits to the file change nothing in the running server.", tests=("tests/test_server_rules.py::test_the_manifest_is_read_once_at_start",)),
    _r("000-2.02", "Any problem in the manifest makes the server exit non-zero before it writes a single line to the client, so no request is ever answered from a bad manifest.", tests=("tests/test_server_stdio.py::test_a_manifest_problem_exits_non_zero_before_anything_is_written_to_stdout",)),
    _r("000-2.03", "A manifest problem is reported on stderr in the same form as the message `staal run` gives for a refused run config.", tests=("tests/test_runconfig.py::test_a_problem_reads_the_same_in_a_manifest_and_in_a_run_config",)),
    _r("000-2.04", "A key the manifest format does not define is refused at every level: top level, server, model, each tool, grants, a grant's needs, net, once, quota and quota money.", tests=("tests/test_manifest.py::test_unknown_keys_are_refused_at_every_level",)),
    _r("000-2.05", "The seed's example manifest (server, model and the refund_order tool with grants, net, deadline, max_concurrent_runs, once and quota), with net.connect_timeout_ms added as 000-3.56 requires, is accepted.", tests=("tests/test_manifest.py::test_the_seeds_example_manifest_loads_into_frozen_objects",)),
    _r("000-2.06", "At start every tool's program is checked as `staal check` checks it, and a program with any check error stops the server with a message naming the tool and the errors.", tests=("tests/test_server_stdio.py::test_a_program_with_check_problems_stops_the_server_at_start", "tests/test_check.py::test_check_refuses_what_serve_refuses_with_the_same_text")),
    _r("000-2.07", "At start every tool's config is turned into a run config with placeholder inputs (the ones `staal config` produces) and validated as `staal run` would; a config that would be refused stops the server.", tests=("tests/test_server_rules.py::test_start_up_checks_run_nothing", "tests/test_check.py::test_a_sqlite_grant_whose_database_does_not_exist_is_refused_at_check_and_at_start")),
    _r("000-2.08", "The start-up checks execute nothing: no program entry function is called, no action reaches any service, and the ledger gains no event.", tests=("tests/test_server_rules.py::test_start_up_checks_run_nothing",)),
    _r("000-2.09", "A tool program that tries to read standard input is refused: the attempt fails the run (kind capability) instead of blocking or receiving any byte of the protocol stream.", tests=("tests/test_runs.py::test_reaching_out_around_the_broker_fails_the_run_as_capability",)),
    _r("000-2.10", "A tool program that tries to listen for connections (bind/listen/accept a server socket) is refused: the attempt fails the run (kind capability).", tests=("tests/test_runs.py::test_reaching_out_around_the_broker_fails_the_run_as_capability",)),
    _r("000-2.11", "print is allowed in a tool program: a printed line appears on the server's stderr and never on the protocol stream.", tests=("tests/test_server_stdio.py::test_what_a_program_and_its_c_library_print_reaches_stderr_and_never_stdout", "tests/test_server_stdio.py::test_a_call_answered_is_already_settled_and_its_files_are_beside_its_journal")),
    _r("000-2.12", "Every line a tool program prints is recorded in its run's journal as a print record.", tests=("tests/test_runs.py::test_printed_lines_go_to_stderr_and_the_journal_never_stdout",)),
    _r("000-2.13", "Secrets appear in the manifest only as environment variable names ({\"env\": NAME}); a literal string where a secret is expected (api_key, a grant's key or dsn) is refused at start.", tests=("tests/test_manifest.py::test_a_secret_written_as_a_value_is_refused_without_repeating_it", "tests/test_manifest.py::test_a_secret_names_an_environment_variable")),
    _r("000-2.14", "A secret's value is read from the server's environment at run time and appears nowhere in the manifest, so a manifest with only env names is complete and safe to commit.", tests=("tests/test_server_logs.py::test_no_secret_value_reaches_stderr_the_protocol_stream_or_the_journal_files",)),
    _r("000-2.15", "`staal-supervisor check MANIFEST` checks what serve checks at start, programs and configs included (in a worker): a manifest it calls valid is one serve starts on, and each problem reads the same in both.", tests=("tests/test_check.py::test_check_refuses_what_serve_refuses_with_the_same_text", "tests/test_check.py::test_check_names_each_of_the_three_mistakes", "tests/test_check.py::test_a_manifest_check_calls_valid_is_one_serve_starts_on")),

    # ------------------------------------------------------------------ 3. Protocol
    _r("000-3.01", "The transport is stdio: each JSON-RPC 2.0 message is one line terminated by a newline, and no message the server writes contains a newline inside it.", tests=("tests/test_protocol_framing.py::test_an_outgoing_message_is_one_line_even_with_newlines_in_its_strings", "tests/test_protocol_framing.py::test_lines_are_split_at_newlines_and_kept_across_reads")),
    _r("000-3.02", "Everything the server writes to the client's stdout is an MCP/JSON-RPC message; nothing else ever appears there.", tests=("tests/test_server_stdio.py::test_what_a_program_and_its_c_library_print_reaches_stderr_and_never_stdout", "tests/test_server_flood.py::test_a_flood_of_calls_is_answered_done_or_busy_and_nothing_runs_twice")),
    _r("000-3.03", "The server's own log lines go to stderr.", tests=("tests/test_server_logs.py::test_stderr_is_one_json_object_per_line_with_time_level_event_and_the_run_and_tool",)),
    _r("000-3.04", "When stdin reaches end of file, the server stops reading and exits once its in-progress runs have ended or stopped as usual.", tests=("tests/test_server_stdio.py::test_when_stdin_closes_the_server_answers_every_call_in_flight_then_exits_0",)),
    _r("000-3.05", "Before reading the manifest, the server duplicates descriptors 0 and 1 to private close-on-exec descriptors used only by the protocol reader and writer.", tests=("tests/test_server_rules.py::test_the_servers_descriptor_0_is_dev_null_and_1_is_its_stderr",)),
    _r("000-3.06", "After the duplication, descriptor 1 points at stderr, so any other write to standard output (a stray print, a traceback, C code) lands on stderr.", tests=("tests/test_server_rules.py::test_the_servers_descriptor_0_is_dev_null_and_1_is_its_stderr", "tests/test_server_stdio.py::test_what_a_program_and_its_c_library_print_reaches_stderr_and_never_stdout")),
    _r("000-3.07", "After the duplication, descriptor 0 points at /dev/null, so nothing but the protocol reader can read the client's messages.", tests=("tests/test_server_rules.py::test_the_servers_descriptor_0_is_dev_null_and_1_is_its_stderr",)),
    _r("000-3.08", "End to end: a tool whose program prints and whose C library (cap ffi.c) writes to standard output is called, and every line the client receives parses as a valid MCP message while the printed text shows up on stderr.", tests=("tests/test_server_stdio.py::test_what_a_program_and_its_c_library_print_reaches_stderr_and_never_stdout",)),
    _r("000-3.09", "The protocol writer serializes a message, then holds an output lock while it writes the whole line and flushes, so concurrent answers never interleave on the stream.", tests=("tests/test_server_flood.py::test_a_flood_of_calls_is_answered_done_or_busy_and_nothing_runs_twice",)),
    _r("000-3.10", "The protocol writer retries short writes and interrupted (EINTR) writes until every byte of the line is written.", tests=("tests/test_fsio.py::test_write_all_carries_on_after_a_signal_cuts_a_pipe_write_short",)),
    _r("000-3.11", "A write that fails for good (e.g. EPIPE, the client gone) makes the server stop reading requests, let running runs finish or stop as usual (journaled and settled), and exit.", tests=("tests/test_server_stdio.py::test_when_the_client_stops_reading_the_server_lets_runs_end_and_exits",)),
    _r("000-3.12", "An incoming line longer than 4 MiB is answered with -32700 (id null) without being parsed, and the server goes on reading the next line.", tests=("tests/test_protocol_framing.py::test_a_line_over_4_mib_is_a_parse_error_with_a_null_id", "tests/test_protocol_framing.py::test_a_line_one_byte_over_4_mib_is_oversized", "tests/test_protocol_framing.py::test_the_connection_goes_on_reading_after_a_refused_line")),
    _r("000-3.13", "An incoming message nested deeper than 64 levels is answered with -32700 or -32600 without being parsed further, and the server goes on reading the next line.", tests=("tests/test_protocol_framing.py::test_a_request_nested_65_deep_is_invalid_and_not_parsed", "tests/test_protocol_framing.py::test_nesting_of_exactly_64_is_allowed_and_65_is_too_deep")),
    _r("000-3.14", "A tool result whose JSON is longer than 1 MiB is not sent: the call answers isError: true with a text saying the result was too large and naming the run id.", tests=("tests/test_protocol_results.py::test_a_result_over_1_mib_is_not_sent_and_the_answer_names_the_run", "tests/test_protocol_results.py::test_a_result_of_exactly_1_mib_of_json_is_sent")),
    _r("000-3.15", "A result refused as too large is still in the run's journal and is returned by staal_run_status for that run id.", tests=("tests/test_protocol_results.py::test_run_status_returns_a_result_too_large_for_a_call_answer",)),
    _r("000-3.16", "A line holding a JSON array (a JSON-RPC batch) is answered with -32600.", tests=("tests/test_protocol_framing.py::test_a_batch_is_invalid_and_nothing_in_it_runs", "tests/test_protocol_framing.py::test_an_empty_batch_is_invalid_too")),
    _r("000-3.17", "Nothing inside a refused batch is executed: no tool call in it reserves, starts a run or gets an answer of its own.", tests=("tests/test_protocol_framing.py::test_a_batch_is_invalid_and_nothing_in_it_runs",)),
    _r("000-3.18", "The server speaks exactly two protocol versions, 2025-11-25 and 2026-07-28.", tests=("tests/test_protocol_matrix.py::test_cell", "tests/test_server_stdio.py::test_an_unsupported_protocol_version_is_32022_naming_the_supported_and_requested_ones")),
    _r("000-3.19", "Under 2025-11-25, initialize is answered with protocolVersion 2025-11-25, serverInfo and the tools capability, and notifications/initialized gets no answer.", tests=("tests/test_protocol_revisions.py::test_initialize_answers_2025_11_25_with_server_info_and_the_tools_capability", "tests/test_protocol_revisions.py::test_initialized_notification_gets_no_answer")),
    _r("000-3.20", "Under 2025-11-25, ping is answered with an empty result.", tests=("tests/test_protocol_revisions.py::test_ping_is_answered_with_an_empty_result_under_2025_11_25",)),
    _r("000-3.21", "Under 2026-07-28, every request must carry the _meta envelope (io.modelcontextprotocol/protocolVersion, .../clientCapabilities, .../clientInfo); a request missing one of these fields is -32602.", tests=("tests/test_protocol_revisions.py::test_a_2026_07_28_request_missing_an_envelope_field_is_invalid_params", "tests/test_protocol_revisions.py::test_a_2026_07_28_envelope_field_of_the_wrong_shape_is_invalid_params")),
    _r("000-3.22", "Under 2026-07-28, server/discover is answered with the supported versions, server info and capabilities.", tests=("tests/test_protocol_revisions.py::test_server_discover_gives_versions_capabilities_server_info_and_cache_fields",)),
    _r("000-3.23", "Under 2026-07-28, every result carries resultType.", tests=("tests/test_protocol_revisions.py::test_every_2026_07_28_result_is_complete_and_carries_the_server_info",)),
    _r("000-3.24", "Under 2026-07-28, the results of server/discover and tools/list carry ttlMs (an integer >= 0) and cacheScope.", tests=("tests/test_protocol_revisions.py::test_server_discover_gives_versions_capabilities_server_info_and_cache_fields", "tests/test_protocol_tools.py::test_every_listed_tool_is_one_the_sdk_accepts_with_its_annotations")),
    _r("000-3.25", "Under 2026-07-28, results carry _meta[\"io.modelcontextprotocol/serverInfo\"] with the server's name and version.", tests=("tests/test_protocol_revisions.py::test_every_2026_07_28_result_is_complete_and_carries_the_server_info",)),
    _r("000-3.26", "Under 2026-07-28, ping is an unknown method (-32601).", tests=("tests/test_protocol_revisions.py::test_ping_is_method_not_found_under_2026_07_28",)),
    _r("000-3.27", "A request whose _meta names a protocol version the server does not support is answered -32022 with data.supported (the versions served) and data.requested (the version asked for).", tests=("tests/test_protocol_revisions.py::test_an_unsupported_envelope_version_is_32022_naming_the_supported_and_requested",)),
    _r("000-3.28", "Fields of one version never appear in the other: 2025-11-25 answers carry no resultType, ttlMs, cacheScope or serverInfo _meta.", tests=("tests/test_protocol_revisions.py::test_no_2025_11_25_answer_carries_a_2026_07_28_field", "tests/test_protocol_fuzz.py::test_requests_with_the_envelope_never_answer_2025_11_25_fields_or_the_reverse")),
    _r("000-3.29", "Each version has its own request handler over shared tool listing and call running: tools/list gives the same tools and schemas, and the same call gives the same outcome, under both versions.", tests=("tests/test_protocol_revisions.py::test_both_revisions_list_the_same_tools_and_shape_a_call_the_same_way",)),
    _r("000-3.30", "A request carrying _meta[\"io.modelcontextprotocol/protocolVersion\"] is served as 2026-07-28, whether or not initialize was sent before.", tests=("tests/test_protocol_revisions.py::test_a_request_with_the_envelope_is_served_as_2026_07_28_without_initialize", "tests/test_protocol_revisions.py::test_a_request_with_the_envelope_is_2026_07_28_even_after_initialize")),
    _r("000-3.31", "Once the client has sent initialize, a request without the _meta version is served as 2025-11-25.", tests=("tests/test_protocol_revisions.py::test_after_initialize_a_request_without_the_envelope_is_served_as_2025_11_25",)),
    _r("000-3.32", "Before any initialize, a request without the _meta version is answered -32602.", tests=("tests/test_protocol_revisions.py::test_a_request_without_the_envelope_before_initialize_is_invalid_params",)),
    _r("000-3.33", "initialize is answered at any point of a connection, including after 2026-07-28 requests, and requests of both versions can be interleaved on one connection.", tests=("tests/test_protocol_revisions.py::test_initialize_is_answered_at_any_time_even_with_an_envelope_and_twice", "tests/test_protocol_revisions.py::test_both_revisions_interleave_on_one_connection_each_with_its_own_fields")),
    _r("000-3.34", "The official Python SDK connects and calls tools in each of its modes: auto (server/discover first), legacy (initialize) and pinned 2026-07-28.", tests=("tests/test_protocol_sdk.py::test_the_sdk_client_lists_and_calls_tools_in_each_mode",)),
    _r("000-3.35", "The official TypeScript SDK connects and calls tools in legacy mode and in auto mode, where a throwaway probe process is started and SIGTERM'd before the real one.", tests=("tests/test_client_typescript.py::test_the_sdk_lists_calls_and_reads_refusals", "tests/test_client_typescript.py::test_auto_and_pinned_modes_start_a_probe_that_is_sigtermd_then_the_real_server", "tests/test_client_typescript.py::test_a_real_server_started_while_the_probe_still_holds_the_lock_waits_and_serves")),
    _r("000-3.36", "The server keeps no state between requests other than whether initialize was seen, the ledger and the journals: a 2026-07-28 request is served the same as the first line of a fresh process.", tests=("tests/test_protocol_revisions.py::test_a_2026_07_28_request_is_served_the_same_on_a_fresh_and_a_used_connection",)),
    _r("000-3.37", "A line that is not valid JSON is answered -32700.", tests=("tests/test_protocol_framing.py::test_a_line_that_is_not_json_is_a_parse_error",)),
    _r("000-3.38", "Valid JSON that is not a valid JSON-RPC 2.0 request (wrong or missing jsonrpc, bad id type, missing or non-string method) is answered -32600.", tests=("tests/test_protocol_framing.py::test_a_message_that_is_not_a_valid_request_is_invalid_with_its_id_when_readable", "tests/test_protocol_framing.py::test_json_that_is_not_an_object_is_an_invalid_request")),
    _r("000-3.39", "A request for a method the server does not know is answered -32601.", tests=("tests/test_protocol_framing.py::test_an_unknown_method_is_method_not_found",)),
    _r("000-3.40", "A known method with invalid parameters (an unknown tool name, a missing _meta field, arguments that are not an object) is answered -32602.", tests=("tests/test_protocol_framing.py::test_invalid_call_params_are_invalid_params", "tests/test_protocol_revisions.py::test_a_2026_07_28_request_missing_an_envelope_field_is_invalid_params")),
    _r("000-3.41", "Every problem with running a tool, including arguments that the program's types refuse, comes back as a tool result with isError: true, never as a JSON-RPC error.", tests=("tests/test_runs.py::test_refused_inputs_are_an_error_naming_the_argument_and_nothing_runs", "tests/test_protocol_results.py::test_a_refused_call_answers_the_applications_text")),
    _r("000-3.42", "A notification the server does not use gets no answer of any kind and changes nothing.", tests=("tests/test_protocol_framing.py::test_notifications_the_server_does_not_use_get_no_answer_and_change_nothing",)),
    _r("000-3.43", "notifications/cancelled for a call whose run has not started yet (its arguments still being checked, or before it holds a slot) stops it: no reserve event, no journal, no run.", tests=("tests/test_server_stdio.py::test_a_cancelled_call_whose_run_has_not_started_does_nothing",)),
    _r("000-3.44", "notifications/cancelled for a call whose run has started does not stop the run: it runs to its end and is journaled and settled as usual.", tests=("tests/test_server_stdio.py::test_a_cancelled_call_whose_run_started_runs_to_its_end_and_gets_no_answer", "tests/test_server_sdk.py::test_a_call_cancelled_while_its_run_is_in_progress_runs_to_its_end_and_gets_no_answer")),
    _r("000-3.45", "After notifications/cancelled for a request, the server sends no result and no error for that request, in both protocol versions.", tests=("tests/test_protocol_calls.py::test_nothing_more_is_sent_for_a_cancelled_call", "tests/test_protocol_sdk.py::test_a_call_the_sdk_gives_up_on_is_cancelled_and_gets_no_answer")),
    _r("000-3.46", "A cancelled call's outcome is readable through staal_run_status under its run id.", tests=("tests/test_server_sdk.py::test_a_call_cancelled_while_its_run_is_in_progress_runs_to_its_end_and_gets_no_answer",)),
    _r("000-3.47", "Every run's id is written to the server's log (stderr) when it starts, so the outcome of a call the client stopped waiting for can be found.", tests=("tests/test_server_logs.py::test_a_run_id_is_logged_when_its_run_starts",)),
    _r("000-3.48", "An HTTP request made by a capability is bounded by net.connect_timeout_ms for connecting and net.timeout_ms for the exchange; a service that never answers fails the action when the timeout passes.", tests=("tests/test_runs.py::test_a_get_to_a_service_that_never_answers_fails_within_its_timeout", "tests/test_runs.py::test_a_post_whose_answer_never_comes_is_in_doubt_and_the_run_stops")),
    _r("000-3.49", "A model call is bounded by the model's timeout_ms per attempt, at most retries + 1 attempts, with each wait between attempts at most 60 s.", tests=("tests/test_model.py::test_after_the_last_attempt_the_run_fails_as_provider_having_asked_retries_plus_one_times", "tests/test_model.py::test_retry_after_is_honored_and_no_wait_is_longer_than_60_s",)),
    _r("000-3.50", "A model provider that never answers is treated as a timeout like any other, failing the call within its bound.", tests=("tests/test_model.py::test_a_provider_that_never_answers_times_out_within_timeout_ms_per_attempt",)),
    _r("000-3.51", "Any raw TCP or TLS exchange a capability makes is bounded by net.connect_timeout_ms and net.timeout_ms."),
    _r("000-3.52", "PostgreSQL connections and each statement are bounded by net.connect_timeout_ms and net.timeout_ms.", tests=("tests/test_postgres.py::test_a_query_longer_than_timeout_ms_is_cancelled_and_fails", "tests/test_postgres.py::test_a_server_that_never_answers_fails_the_connection_within_connect_timeout")),
    _r("000-3.53", "SQLite waits at most 5 s for a locked database and then fails the action; a statement itself has no time limit (the operator keeps a tool's queries quick).", tests=("tests/test_sqlite.py::test_waiting_for_a_locked_database_is_bounded_and_the_write_fails_for_certain",)),
    _r("000-3.54", "Computation is bounded by max_steps; a program that exceeds it fails the run as kind budget.", tests=("tests/test_runs.py::test_max_steps_fails_a_long_computation_as_budget", "tests/test_limits.py::test_a_loop_in_program_code_fails_as_budget_just_past_max_steps")),
    _r("000-3.55", "Listening cannot make a run wait without end: a tool program's attempt to listen is refused before any accept can block (as 000-2.10).", tests=("tests/test_runs.py::test_reaching_out_around_the_broker_fails_the_run_as_capability",)),
    _r("000-3.56", "A tool without net.connect_timeout_ms or net.timeout_ms in the manifest stops the server at start; the script defaults are never used in a tool.", tests=("tests/test_manifest.py::test_every_tool_gives_both_network_timeouts",)),
    _r("000-3.57", "A tool that can reach a model, with a model section lacking timeout_ms or retries, stops the server at start.", tests=("tests/test_manifest.py::test_model_timeout_and_retries_are_required_when_a_tool_can_reach_a_model", "tests/test_manifest.py::test_a_tool_that_can_reach_a_model_needs_the_model_section")),
    _r("000-3.58", "A tool's deadline (e.g. \"120s\") is counted from when the runtime begins executing the run, not from when the request arrived.", tests=("tests/test_server_stdio.py::test_a_tools_deadline_ends_a_run_that_keeps_acting", "tests/test_engine_context.py::test_the_deadline_counts_from_the_runs_start_even_when_resumed")),
    _r("000-3.59", "Past the deadline, a run that is about to start an action or model call fails as kind deadline instead of starting it.", tests=("tests/test_runs.py::test_past_the_deadline_no_new_action_starts", "tests/test_engine_context.py::test_a_new_action_past_the_deadline_fails_the_run_and_is_not_performed", "tests/test_engine_context.py::test_a_caught_deadline_still_fails_the_run_and_later_actions_too")),
    _r("000-3.60", "A deadline never cuts an action in half: an action begun before the deadline completes and its outcome is journaled, so a deadline never leaves an action in doubt.", tests=("tests/test_runs.py::test_past_the_deadline_no_new_action_starts",)),
    _r("000-3.61", "A run ends no later than its deadline plus its longest single operation, and the public documentation says a run does not end exactly at its deadline.", tests=("tests/test_docs.py::test_the_operators_guide_says_a_run_does_not_end_exactly_at_its_deadline", "tests/test_runs.py::test_past_the_deadline_no_new_action_starts")),
    _r("000-3.62", "A resumed run replays operations already in its journal and, if the journal records that it ended at its deadline, ends there again with the same deadline failure.", tests=("tests/test_runs.py::test_a_resumed_run_past_its_deadline_replays_then_fails_before_the_next_action",)),
    _r("000-3.63", "A tool's deadline becomes the run's limits.deadline_ms.", tests=("tests/test_runconfig.py::test_a_tools_deadline_becomes_the_runs_deadline_ms",)),
    _r("000-3.64", "A call that carried a progressToken gets exactly one notifications/progress, when its run starts, whose message holds the run id; nothing is sent per operation.", tests=("tests/test_protocol_calls.py::test_a_call_with_a_progress_token_gets_progress_carrying_the_message",)),
    _r("000-3.65", "A call without a progressToken gets no progress notification.", tests=("tests/test_protocol_calls.py::test_a_call_without_a_progress_token_gets_no_progress",)),
    _r("000-3.66", "A run's memory is bounded: a tool's max_memory (\"256MiB\", \"1GiB\"; default 512MiB, at most the machine's memory) is what a run may allocate beyond its worker's own; a program allocating without end fails the run as kind budget with a message naming the limit, and the server's other calls are not affected.", tests=("tests/test_run_limits.py::test_a_program_that_allocates_without_end_fails_as_budget_naming_its_memory_limit", "tests/test_runconfig.py::test_max_memory_max_wait_and_max_cpu_become_the_runs_limits")),
    _r("000-3.67", "A wrong max_memory, max_wait or max_cpu stops the server at start with a problem naming its key path and what is expected.", tests=("tests/test_manifest.py::test_a_wrong_max_memory_is_refused_naming_its_key_path", "tests/test_manifest.py::test_a_wrong_max_wait_or_max_cpu_is_refused_naming_its_key_path", "tests/test_budgets.py::test_anything_else_is_refused_as_a_size_saying_what_is_expected")),
    _r("000-3.68", "C code that crashes at the run's memory limit (an allocation refused inside C) fails the run as kind budget, not as a crash to resume.", tests=("tests/test_run_limits.py::test_c_code_that_crashes_at_its_memory_limit_fails_the_run_as_budget_and_is_not_resumed",)),
    _r("000-3.69", "An endless loop inside C code is ended by the run's CPU limit (a tool's max_cpu) and fails the run as kind budget at once, journaled with an end of kind budget, without being resumed.", tests=("tests/test_run_limits.py::test_an_endless_loop_inside_c_code_fails_as_budget_at_its_cpu_limit_and_is_not_resumed",)),
    _r("000-3.70", "A worker ended by its own CPU or memory limit (SIGXCPU from RLIMIT_CPU, or the worker's own memory exit code) is told apart from a kill from outside or a crash, which are resumed; its journal is closed with an end of kind budget, or a stop when an op is in doubt.", tests=("tests/test_budgets.py::test_a_worker_ended_by_sigxcpu_failed_its_cpu_limit", "tests/test_budgets.py::test_a_worker_that_exited_with_the_memory_code_failed_its_memory_limit", "tests/test_budgets.py::test_a_kill_from_outside_a_crash_or_an_exit_is_no_limit", "tests/test_budgets.py::test_a_run_its_limit_ended_is_closed_with_an_end_failed_as_budget_and_its_usage", "tests/test_budgets.py::test_a_run_its_limit_ended_with_an_op_in_doubt_waits_for_an_operator")),
    _r("000-3.71", "A program waiting outside any capability (a sleep loop) fails as kind deadline at its tool's deadline.", tests=("tests/test_run_limits.py::test_a_sleep_loop_fails_as_deadline_at_the_tools_deadline",)),
    _r("000-3.72", "A tool without a deadline still bounds waiting outside actions: past max_wait (default 300s) of time outside its actions, a run waiting on an event nobody sets fails as kind deadline, even if it catches the failure.", tests=("tests/test_run_limits.py::test_a_wait_on_an_event_nobody_sets_fails_as_deadline_at_max_wait_without_a_deadline", "tests/test_runconfig.py::test_a_tool_without_limit_keys_gets_the_defaults_and_its_deadline_bounds_its_waits")),

    # ------------------------------------------------------------------ 5. Calling a tool
    _r("000-5.01", "tools/call with a tool name the server does not have is answered -32602.", tests=("tests/test_server_stdio.py::test_an_unknown_tool_is_32602_and_nothing_runs",)),
    _r("000-5.02", "A call's arguments are checked by Staal's own input rules before anything runs; refused arguments give isError: true with a message that lets the model correct them, and nothing is reserved or run.", tests=("tests/test_server_sdk.py::test_arguments_the_types_refuse_are_a_tool_error_with_the_problem_and_nothing_runs",)),
    _r("000-5.03", "The steps of a call happen in order (tool lookup, argument check, once lookup, concurrency slot, reservation, run, settle, answer) and a call refused at one step does none of the later ones.", tests=("tests/test_server_sdk.py::test_arguments_the_types_refuse_are_a_tool_error_with_the_problem_and_nothing_runs", "tests/test_server_sdk.py::test_over_the_quota_a_call_is_refused_naming_the_quota_and_nothing_runs", "tests/test_server_sdk.py::test_a_once_call_answered_busy_holds_no_key_and_the_same_call_later_runs")),
    _r("000-5.04", "For a tool with once, a call whose key the ledger already holds starts nothing new and is answered from the existing run, even when the server is at its concurrency limit.", tests=("tests/test_server_sdk.py::test_a_repeated_once_call_while_the_first_runs_is_in_progress_and_status_follows_it_to_done",)),
    _r("000-5.05", "With server.max_concurrent_runs runs in progress, a further call answers isError: true saying the server is busy and to try again later; nothing is reserved and nothing runs.", tests=("tests/test_server_flood.py::test_with_every_slot_held_a_flood_gets_exactly_that_many_runs_and_busy_for_the_rest",)),
    _r("000-5.06", "With a tool's own max_concurrent_runs runs of that tool in progress, a further call to it answers busy the same way, while other tools can still be called.", tests=("tests/test_server_sdk.py::test_a_tool_at_its_own_limit_answers_busy_at_once_while_other_tools_run",)),
    _r("000-5.07", "A call refused as busy is answered at once and never run later: there is no queue.", tests=("tests/test_server_flood.py::test_with_every_slot_held_a_flood_gets_exactly_that_many_runs_and_busy_for_the_rest", "tests/test_server_sdk.py::test_a_tool_at_its_own_limit_answers_busy_at_once_while_other_tools_run")),
    _r("000-5.08", "A burst of many simultaneous calls gets at most server.max_concurrent_runs concurrent runs (and per tool its own limit) and busy answers for the rest.", tests=("tests/test_server_flood.py::test_a_flood_of_calls_is_answered_done_or_busy_and_nothing_runs_twice", "tests/test_server_flood.py::test_with_every_slot_held_a_flood_gets_exactly_that_many_runs_and_busy_for_the_rest")),
    _r("000-5.09", "A call that would exceed its tool's quota answers isError: true naming the quota and when it frees up, and nothing runs.", tests=("tests/test_server_sdk.py::test_over_the_quota_a_call_is_refused_naming_the_quota_and_nothing_runs",)),
    _r("000-5.10", "Each run has a fresh run id of 32 random lowercase hexadecimal characters.", tests=("tests/test_ids.py::test_a_run_id_is_32_random_hexadecimal_characters", "tests/test_ids.py::test_anything_else_is_not_a_run_id")),
    _r("000-5.11", "A run's journal is <journals>/<tool>/<first two characters of the run id>/<run id>.journal.", tests=("tests/test_server_stdio.py::test_a_call_answered_is_already_settled_and_its_files_are_beside_its_journal",)),
    _r("000-5.12", "A run's inputs are exactly the call's arguments (defaults filled in); no argument can add or change a grant, a secret or a limit, whatever its name.", tests=("tests/test_runs.py::test_refused_inputs_are_an_error_naming_the_argument_and_nothing_runs",)),
    _r("000-5.13", "A run is settled in the ledger before the call is answered.", tests=("tests/test_server_stdio.py::test_a_call_answered_is_already_settled_and_its_files_are_beside_its_journal",)),
    _r("000-5.14", "A run that is done answers isError: false, structuredContent {\"result\": <result>}, and content holding exactly one text item whose text is the result's JSON.", tests=("tests/test_protocol_results.py::test_a_done_run_answers_its_result_as_structured_content_and_as_json_text",)),
    _r("000-5.15", "A run that failed with kind capability answers isError: true with the broker's own message as the text (e.g. which limit and what the action needed).", tests=("tests/test_protocol_results.py::test_a_capability_failure_answers_the_brokers_message_verbatim",)),
    _r("000-5.16", "A run that failed with kind validation, action, value, provider, budget or deadline answers isError: true with a text giving the kind and the failure's message.", tests=("tests/test_protocol_results.py::test_other_failures_answer_their_kind_and_message",)),
    _r("000-5.17", "A run that failed with kind internal answers isError: true with a text saying an internal error happened and naming the run id; the details go to stderr, not to the client.", tests=("tests/test_protocol_results.py::test_an_internal_failure_names_the_run_and_keeps_its_details_out", "tests/test_recovery.py::test_a_worker_that_keeps_dying_is_resumed_three_times_then_fails_as_internal", "tests/test_call_faults.py::test_a_fault_after_the_reservation_is_an_internal_failure_naming_the_run", "tests/test_tracebacks.py::test_the_server_logs_where_the_program_failed_and_the_client_gets_only_kind_and_message")),
    _r("000-5.18", "A stopped run answers isError: true with a text saying the action may already have happened, that the run waits for an operator, its run id, and not to call the tool again for it, plus structuredContent {\"status\": \"waiting_for_operator\", \"run\": <run id>}.", tests=("tests/test_protocol_results.py::test_a_stopped_run_says_it_waits_for_an_operator_and_gives_its_run_id", "tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator")),
    _r("000-5.19", "A config or input problem found when the run is built (an error) answers isError: true with the problem, so the model can correct its arguments.", tests=("tests/test_protocol_results.py::test_a_config_or_input_problem_answers_the_problem",)),
    _r("000-5.20", "After a failed call the model can call again with different arguments and get a new run.", tests=("tests/test_server_sdk.py::test_arguments_the_types_refuse_are_a_tool_error_with_the_problem_and_nothing_runs",)),
    _r("000-5.21", "No text sent to the client ever contains a secret's value, even when the failure involves the secret (e.g. a service echoing the key).", tests=("tests/test_server_logs.py::test_no_secret_value_reaches_stderr_the_protocol_stream_or_the_journal_files",)),
    _r("000-5.22", "A run's log is never sent to the client; it stays beside the journal in the journal directory.", tests=("tests/test_server_stdio.py::test_a_call_answered_is_already_settled_and_its_files_are_beside_its_journal",)),
    _r("000-5.23", "Without once, every call is a new run: sending the same call twice gives two runs with different run ids, and both may act.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-5.24", "At start the server logs a warning on stderr for each tool that can spend money and has no once, and none for other tools.", tests=("tests/test_server_stdio.py::test_a_money_tool_without_once_is_warned_about_at_start_in_the_json_log",)),
    _r("000-5.25", "once.by must name at least one of the tool's inputs and may name all of them; an empty by, or a name that is not an input, stops the server at start.", tests=("tests/test_server_rules.py::test_once_by_naming_something_that_is_not_an_input_stops_the_server_at_start", "tests/test_manifest.py::test_once_by_names_at_least_one_argument_each_once")),
    _r("000-5.26", "The once key is the SHA-256 of the tool's name and the by-named arguments in canonical JSON (keys sorted, money as the runtime writes it), so equal operations give equal keys.", tests=("tests/test_canonical.py::test_the_once_key_is_sha256_of_the_tool_and_named_arguments_in_canonical_form", "tests/test_canonical.py::test_the_once_key_depends_only_on_the_tool_and_the_named_arguments", "tests/test_canonical.py::test_key_order_never_changes_the_canonical_form")),
    _r("000-5.27", "The once key is written in the reserve event that starts the run and fsync'd before the run begins, so a repeated call arriving while the run is still going finds it.", tests=("tests/test_ledger.py::test_concurrent_calls_with_one_once_key_reserve_exactly_one_run_and_the_rest_wait_for_it", "tests/test_ledger.py::test_a_reserve_is_on_disk_when_the_fsync_that_returns_it_runs")),
    _r("000-5.28", "A call whose once key is found never starts a run: no new reserve event, journal or action.", tests=("tests/test_ledger.py::test_a_held_once_key_with_the_same_arguments_answers_the_existing_run_and_writes_nothing",)),
    _r("000-5.29", "A repeated once call whose earlier run is still running answers isError: true saying it is already in progress, with the run id, to follow with staal_run_status.", tests=("tests/test_server_sdk.py::test_a_repeated_once_call_while_the_first_runs_is_in_progress_and_status_follows_it_to_done",)),
    _r("000-5.30", "A repeated once call whose earlier run is done gets the earlier result exactly as it was first answered.", tests=("tests/test_server_sdk.py::test_a_repeated_once_call_gets_the_first_result_exactly_and_the_service_holds_one_refund",)),
    _r("000-5.31", "A repeated once call whose earlier run failed gets the earlier failure.", tests=("tests/test_server_sdk.py::test_a_refund_over_each_is_refused_with_the_brokers_message_and_no_refund_is_asked",)),
    _r("000-5.32", "A repeated once call whose earlier run waits for an operator gets the same stopped result.", tests=("tests/test_operators.py::test_a_repeated_once_call_of_a_waiting_run_gets_the_same_stopped_result",)),
    _r("000-5.33", "A call with the same once key but different arguments (same order, other amount) is refused with isError: true as a different operation, and nothing runs.", tests=("tests/test_ledger.py::test_a_held_once_key_with_different_arguments_is_a_different_operation",)),
    _r("000-5.34", "Arguments are compared as the runtime reads them, with defaults filled in: \"35\" and \"35.00\" USD are equal, and an omitted default equals the default given explicitly.", tests=("tests/test_server_sdk.py::test_a_repeated_once_call_gets_the_first_result_exactly_and_the_service_holds_one_refund",)),
    _r("000-5.35", "once.keep is a whole number followed by m, h or d; any other form stops the server at start.", tests=("tests/test_manifest.py::test_once_keep_is_in_minutes_hours_or_days",)),
    _r("000-5.36", "once.keep longer than server.keep stops the server at start; once.keep left out means server.keep.", tests=("tests/test_manifest.py::test_once_keep_may_not_outlast_server_keep", "tests/test_manifest.py::test_once_keep_defaults_to_server_keep")),
    _r("000-5.37", "A once key is remembered for keep counted from the end of its run; after that the same arguments start a new run.", tests=("tests/test_ledger.py::test_a_settled_runs_key_is_kept_for_keep_counted_from_the_runs_end", "tests/test_ledger.py::test_a_key_kept_forever_never_expires")),
    _r("000-5.38", "A call that never started (refused busy, refused over quota, or released at start) holds no once key: the same call afterwards starts a run.", tests=("tests/test_ledger.py::test_a_released_run_holds_no_key", "tests/test_ledger.py::test_a_call_refused_over_its_quota_holds_no_key")),
    _r("000-5.39", "Once keys are scoped to the tool: the same by-arguments on two different tools are two different operations.", tests=("tests/test_ledger.py::test_once_keys_are_scoped_to_the_tool",)),
    _r("000-5.40", "A repeated once call is answered from the same run, and a resumed run sends the same Idempotency-Key values to the service as its first attempt.", tests=("tests/test_exactly_once.py::test_a_keyed_post_in_doubt_is_sent_again_with_the_same_key", "tests/test_exactly_once.py::test_killed_after_a_keyed_post_intent_the_resume_sends_it_once_with_its_key")),
    _r("000-5.41", "A payment grant with idempotency_key keeps sending Idempotency-Key headers whether or not the tool has once.", tests=("tests/test_server_sdk.py::test_a_refund_within_the_limits_is_done_and_the_service_holds_it", "tests/test_stripe.py::test_the_refund_post_carries_the_run_id_and_op_as_its_idempotency_key")),
    _r("000-5.42", "Runs resumed at start are resumed one at a time, and all of them before the first request is answered.", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled",)),
    _r("000-5.43", "With more than 4 x server.max_concurrent_runs + 16 calls in progress (being checked or running), a new call is answered busy at once.", tests=("tests/test_server_rules.py::test_more_than_four_times_the_run_limit_plus_16_calls_in_progress_are_answered_busy",)),
    _r("000-5.44", "A tool with no grants is annotated read-only, not destructive, idempotent and closed-world.", tests=("tests/test_protocol_tools.py::test_a_tool_with_no_grants_is_read_only_not_destructive_idempotent_and_closed_world",)),
    _r("000-5.45", "A tool whose grants are all read capabilities is annotated read-only and idempotent, and closed-world when none of them reaches the network.", tests=("tests/test_protocol_tools.py::test_a_tool_with_only_reads_is_read_only_and_idempotent_and_closed_world_off_the_network",)),
    _r("000-5.46", "A tool with only read capabilities, one of which reaches the network, is annotated open-world.", tests=("tests/test_protocol_tools.py::test_a_tool_with_network_reads_only_is_read_only_idempotent_and_open_world",)),
    _r("000-5.47", "A tool with any write capability is annotated not read-only and destructive, and not idempotent without once.", tests=("tests/test_protocol_tools.py::test_a_tool_with_reads_and_a_write_is_destructive_and_not_idempotent_without_once",)),
    _r("000-5.48", "A tool with a write capability and once is annotated idempotent.", tests=("tests/test_protocol_tools.py::test_a_tool_with_a_write_and_once_is_idempotent",)),
    _r("000-5.49", "idempotency_key alone does not make a tool idempotent (a repeated call is a new run with new keys).", tests=("tests/test_protocol_tools.py::test_idempotency_key_alone_does_not_make_a_tool_idempotent",)),
    _r("000-5.50", "A narrowed grant (only, each, uses, max) is annotated by its capability's read/write and network nature; narrowing never makes a tool look read-only, closed-world or idempotent.", tests=("tests/test_protocol_tools.py::test_a_narrowed_capability_is_annotated_by_its_capabilitys_nature",)),
    _r("000-5.51", "Annotations never claim more than the broker enforces: a grant's needs count when deciding read-only, destructive and open-world.", tests=("tests/test_protocol_tools.py::test_the_grants_a_composite_acts_through_count",)),
    _r("000-5.52", "A tool's title annotation is the manifest tool's title.", tests=("tests/test_protocol_tools.py::test_the_title_annotation_is_the_tools_title",)),
    _r("000-5.53", "An unexpected error in a call is an internal failure naming its run (or saying no run started), logged with its traceback; never busy, which a client would retry and so repeat an action; a call is never answered twice and the server serves on.", tests=("tests/test_call_faults.py::test_a_fault_after_the_reservation_is_an_internal_failure_naming_the_run", "tests/test_call_faults.py::test_a_fault_after_the_answer_is_logged_and_the_server_serves_on")),
    _r("000-5.54", "Where a program failed (its own frames: file, line, function, source line, secrets redacted) goes to the operator, in the server's log, the run's log and the journal's end; the client gets only the failure's kind and message.", tests=("tests/test_tracebacks.py::test_the_server_logs_where_the_program_failed_and_the_client_gets_only_kind_and_message", "tests/test_tracebacks.py::test_staal_run_prints_the_traceback_on_stderr_and_journal_show_shows_it", "tests/test_tracebacks.py::test_a_secret_in_a_source_line_is_redacted")),

    # ------------------------------------------------------------------ 6. Quotas across calls
    _r("000-6.01", "A quota bounds a tool's calls and money over a sliding window: only reservations made within the last window count.", tests=("tests/test_ledger.py::test_the_window_slides_by_reserve_time_and_includes_both_ends",)),
    _r("000-6.02", "Before a run starts, the server reserves one call and the run's worst-case spend: per money grant its max, or each x uses where there is no max, summed.", tests=("tests/test_ledger.py::test_an_unsettled_run_holds_its_worst_case_until_it_settles_to_what_it_charged",)),
    _r("000-6.03", "A call that would take the tool past quota.calls within the window is refused and nothing runs.", tests=("tests/test_ledger.py::test_a_call_past_the_calls_quota_is_refused_naming_it_and_when_it_frees",)),
    _r("000-6.04", "A call whose worst-case spend would take the tool past quota.money within the window is refused and nothing runs.", tests=("tests/test_ledger.py::test_a_call_past_the_money_quota_is_refused_naming_it_and_when_it_frees",)),
    _r("000-6.05", "A call refused over quota writes no ledger event and holds nothing.", tests=("tests/test_ledger.py::test_a_call_refused_over_its_quota_holds_no_key",)),
    _r("000-6.06", "The quota refusal text names the quota that is exhausted (calls or money, with its limit) and when enough of it frees up.", tests=("tests/test_ledger.py::test_a_call_past_the_calls_quota_is_refused_naming_it_and_when_it_frees", "tests/test_ledger.py::test_a_call_past_the_money_quota_is_refused_naming_it_and_when_it_frees")),
    _r("000-6.07", "When a run ends, its reservation is settled to what the broker actually charged, per grant as the run's usage reports it; the call itself stays counted.", tests=("tests/test_ledger.py::test_an_unsettled_run_holds_its_worst_case_until_it_settles_to_what_it_charged", "tests/test_ledger.py::test_a_settled_runs_call_still_counts_and_a_released_run_counts_nothing")),
    _r("000-6.08", "Concurrent calls cannot overspend together: each holds its worst case until it settles, so a call that would fit only if another's reservation were ignored is refused.", tests=("tests/test_ledger.py::test_no_sequence_of_calls_lets_a_window_exceed_its_quota_and_reading_back_agrees",)),
    _r("000-6.09", "A run that stops in doubt keeps its whole reservation (no settle event) until it is resolved and resumed to an end.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-6.10", "Quota use survives a restart: calls and money held before the server stopped still count within the window afterwards.", tests=("tests/test_ledger.py::test_quota_use_survives_a_restart",)),
    _r("000-6.11", "The ledger is <journals>/server.ledger, one JSON object per line per event.", tests=("tests/test_ledger.py::test_reopening_the_ledger_gives_back_every_run_as_it_was",)),
    _r("000-6.12", "Each ledger event is written and fsync'd before anything that depends on it: reserve before the inputs file and the run, settle before the answer, release before the inputs file is removed.", tests=("tests/test_ledger.py::test_a_reserve_is_on_disk_when_the_fsync_that_returns_it_runs",)),
    _r("000-6.13", "A run exists from its reserve event, and its journal (header run id, file name and the run id inside its idempotency keys) is named by the run id that event records.", tests=("tests/test_server_sdk.py::test_a_refund_within_the_limits_is_done_and_the_service_holds_it", "tests/test_exactly_once.py::test_a_keyed_post_in_doubt_is_sent_again_with_the_same_key")),
    _r("000-6.14", "A serving process holds an OS lock on <journals>/server.lock, which is freed when the process dies, even by SIGKILL.", tests=("tests/test_lockfile.py::test_a_holder_killed_with_sigkill_frees_the_lock_within_the_wait",)),
    _r("000-6.15", "A second server on the same journal directory waits up to 5 s for the lock and, if it is still held, refuses to start with a message saying the directory is in use.", tests=("tests/test_lockfile.py::test_a_lock_held_by_another_server_is_refused_after_the_wait_naming_the_lock_file",)),
    _r("000-6.16", "A server that gets the lock within the 5 s wait (the previous process exiting, e.g. an SDK probe that was SIGTERM'd) starts normally.", tests=("tests/test_lockfile.py::test_a_holder_that_lets_go_while_we_wait_lets_us_in",)),
    _r("000-6.17", "A torn last line of the ledger is discarded at start and the server starts.", tests=("tests/test_ledger.py::test_a_torn_last_line_is_discarded_and_cut_so_the_next_event_starts_a_line",)),
    _r("000-6.18", "Any other ledger damage (a bad line before the last, an unknown event, a missing field) stops the server with a clear error.", tests=("tests/test_ledger.py::test_a_bad_line_before_the_last_is_damage_naming_the_line", "tests/test_ledger.py::test_an_unknown_event_or_missing_field_is_damage_naming_the_line")),
    _r("000-6.19", "A reserve event holds the run id, tool, time, calls and money held, and, for a tool with once, the once key and the arguments hash.", tests=("tests/test_records.py::test_every_record_round_trips_through_json", "tests/test_records.py::test_a_missing_required_field_is_named")),
    _r("000-6.20", "A settle event holds the run id, the money actually charged and the run's outcome kind.", tests=("tests/test_records.py::test_every_record_round_trips_through_json", "tests/test_records.py::test_an_outcome_must_be_one_of_the_three")),
    _r("000-6.21", "A release event holds the run id and is written only for a reservation whose run never started.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-6.22", "Recovery at start checks that each run has exactly one reserve and at most one settle or release, and a ledger that breaks this stops the server.", tests=("tests/test_ledger.py::test_a_ledger_breaking_one_reserve_then_one_end_per_run_is_damage_naming_the_line",)),
    _r("000-6.23", "The ledger writer refuses to commit a second reserve, or a settle/release for a run already settled or released, or for a run with no reserve.", tests=("tests/test_ledger.py::test_a_second_settle_or_release_is_refused_as_a_bug_and_nothing_is_written", "tests/test_ledger.py::test_settling_or_releasing_a_run_the_ledger_does_not_hold_is_refused_as_a_bug", "tests/test_ledger.py::test_the_state_refuses_to_apply_a_second_reserve_and_changes_nothing")),
    _r("000-6.24", "The ledger is compacted at start and at each daily sweep.", tests=("tests/test_operators.py::test_retention_deletes_the_log_then_the_journal_of_runs_settled_longer_ago_than_keep",)),
    _r("000-6.25", "Compaction keeps every event of a run that is not settled.", tests=("tests/test_ledger.py::test_compaction_keeps_exactly_the_runs_seed_section_6_lists",)),
    _r("000-6.26", "Compaction keeps every event of a run whose journal or log is still kept under retention.", tests=("tests/test_ledger.py::test_compaction_keeps_exactly_the_runs_seed_section_6_lists", "tests/test_ledger.py::test_files_kept_may_be_a_predicate")),
    _r("000-6.27", "Compaction keeps every event of a run reserved within its tool's quota window.", tests=("tests/test_ledger.py::test_compaction_keeps_exactly_the_runs_seed_section_6_lists",)),
    _r("000-6.28", "Compaction keeps every event of a run that holds a once key not yet expired.", tests=("tests/test_ledger.py::test_compaction_keeps_exactly_the_runs_seed_section_6_lists",)),
    _r("000-6.29", "Compaction drops the events of released runs, and of settled runs that meet none of the keep conditions.", tests=("tests/test_ledger.py::test_compaction_keeps_exactly_the_runs_seed_section_6_lists",)),
    _r("000-6.30", "Compaction writes the new ledger to a temporary file, fsyncs it and renames it over the old one, so a crash at any point leaves either the old or the new ledger intact.", tests=("tests/test_ledger.py::test_a_crash_at_any_step_of_compaction_leaves_one_whole_ledger", "tests/test_ledger.py::test_compaction_writes_a_private_temp_file_syncs_it_then_renames_and_syncs_the_directory")),
    _r("000-6.31", "Each ledger event records its time as an integer count of UTC milliseconds since 1970.", tests=("tests/test_ledger.py::test_reopening_the_ledger_gives_back_every_run_as_it_was",)),
    _r("000-6.32", "Ledger time never goes backwards: each event is stamped with the later of the wall clock and the last event's time.", tests=("tests/test_ledger.py::test_a_clock_set_back_stamps_events_with_the_ledgers_time_and_warns_once",)),
    _r("000-6.33", "A wall clock found behind the ledger's last time is logged as a warning on stderr.", tests=("tests/test_ledger.py::test_a_clock_set_back_stamps_events_with_the_ledgers_time_and_warns_once", "tests/test_ledger.py::test_a_clock_behind_the_ledger_at_open_is_reported")),
    _r("000-6.34", "A clock set back can neither shorten a quota window nor reorder ledger events: a full quota stays full until the window has passed in ledger time.", tests=("tests/test_ledger.py::test_a_clock_set_back_cannot_shorten_a_quota_window",)),
    _r("000-6.35", "A run's result reports usage per capability parameter of the entry function: actions attempted and money charged per currency, including capabilities narrowed from it.", tests=("tests/test_runs.py::test_uses_bounds_actions_per_run", "tests/test_runs.py::test_narrowing_in_code_tightens_and_never_widens")),
    _r("000-6.36", "A resumed run's usage includes its replayed operations, so the settlement after a resume counts money charged before the crash.", tests=("tests/test_exactly_once.py::test_killed_after_an_outcome_the_resume_replays_it_without_a_request", "tests/test_exactly_once.py::test_resolving_that_it_happened_then_resuming_finishes_without_a_second_request", "tests/test_programs_doc.py::test_a_run_killed_after_its_first_action_resumes_as_the_page_shows_and_nothing_happens_twice")),

    # ------------------------------------------------------------------ 7. Crashes and restarts
    _r("000-7.01", "If the server dies during a call, the client sees its connection close (end of file on the server's stdout).", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice", "tests/crash/test_crash_matrix.py::test_a_supervisor_killed_while_the_service_holds_the_refund_resends_it_under_its_key_at_start", "tests/crash/test_judgement.py::test_the_connection_closing_counts_only_when_the_server_process_is_gone")),
    _r("000-7.02", "After a restart, repeating a call of a tool with once gets the original run (same run id, no new run).", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.03", "After a restart, repeating a call of a tool without once starts a new run.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.04", "Each step of a call (reserve, keep arguments, create journal, run, waiting record, settle, answer) is durable before the next one begins.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice", "tests/crash/test_crash_matrix.py::test_a_run_that_ended_as_the_supervisor_died_is_settled_from_its_end_at_the_next_start")),
    _r("000-7.05", "Killed right after the reserve event: at the next start there is no journal, and the run gets a release event.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.06", "Killed right after the inputs file was written: at the next start the run gets a release event and its inputs file is removed.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.07", "Killed right after the journal's first line was written: at the next start the run is resumed, which runs it from the beginning, and it is settled.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.08", "Killed while running (after an intent or after an outcome record): at the next start the run is resumed from its journal and kept arguments as `staal resume` would, and it finishes, fails or stops in doubt.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice", "tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled", "tests/crash/test_crash_matrix.py::test_a_worker_killed_after_the_reads_outcome_is_replaced_and_the_read_is_replayed_not_resent", "tests/crash/test_crash_matrix.py::test_a_worker_killed_after_its_end_record_is_replaced_by_one_that_reports_that_end", "tests/crash/test_crash_matrix.py::test_a_supervisor_killed_while_the_service_holds_the_refund_resends_it_under_its_key_at_start")),
    _r("000-7.09", "Killed after the waiting record was written: at the next start the run is resumed and stops again, and the waiting record is left byte-for-byte as first written.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice", "tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator")),
    _r("000-7.10", "Killed right after the settle event: at the next start nothing is redone, no second settle is written, and the inputs file is gone.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.11", "Killed after the answer was sent: nothing is recovered, and a repeated once call is answered from the ledger and journal.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.12", "Across every kill point, each action reaches the service at most once and the ledger invariants hold after recovery.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice", "tests/crash/test_crash_matrix.py::test_a_worker_killed_after_the_reads_outcome_is_replaced_and_the_read_is_replayed_not_resent", "tests/crash/test_crash_matrix.py::test_a_worker_killed_after_its_end_record_is_replaced_by_one_that_reports_that_end", "tests/crash/test_crash_matrix.py::test_a_supervisor_killed_while_the_service_holds_the_refund_resends_it_under_its_key_at_start", "tests/crash/test_crash_matrix.py::test_a_run_that_ended_as_the_supervisor_died_is_settled_from_its_end_at_the_next_start", "tests/crash/test_judgement.py::test_a_second_post_under_the_same_key_fails_a_cell_though_the_service_refunded_once")),
    _r("000-7.13", "A run's arguments are written to <run id>.inputs.json beside its journal, after the reserve and before the journal is created.", tests=("tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice",)),
    _r("000-7.14", "A run's inputs file is removed as soon as the run is settled.", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled", "tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice")),
    _r("000-7.15", "At every start, any inputs file left for a settled or released run is removed.", tests=("tests/test_recovery.py::test_a_run_that_ended_but_was_not_settled_is_settled_from_its_end", "tests/crash/test_crash_matrix.py::test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice")),
    _r("000-7.16", "A run's inputs file is kept while the run may still need resuming (unfinished or waiting for an operator).", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled",)),
    _r("000-7.17", "A run's log is written beside its journal as <run id>.log.jsonl.", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled",)),
    _r("000-7.18", "Recovery goes through the ledger and the journal directory together and completes before the server answers anything.", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled",)),
    _r("000-7.19", "At start, a journal with no end record is resumed; such runs are resumed one after another.", tests=("tests/test_recovery.py::test_an_interrupted_run_is_resumed_at_start_and_settled", "tests/crash/test_crash_matrix.py::test_a_supervisor_killed_while_the_service_holds_the_refund_resends_it_under_its_key_at_start")),
    _r("000-7.20", "At start, a journal that has an end record but no settle event is settled from its end record's usage and outcome.", tests=("tests/test_recovery.py::test_a_run_that_ended_but_was_not_settled_is_settled_from_its_end", "tests/crash/test_crash_matrix.py::test_a_run_that_ended_as_the_supervisor_died_is_settled_from_its_end_at_the_next_start")),
    _r("000-7.21", "At start, a run with a waiting record is resumed: it stops again unless an operator resolved it, in which case it runs to an end and is settled.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator", "tests/test_operators.py::test_a_waiting_run_resolved_by_an_operator_is_resumed_and_settled_at_the_next_start")),
    _r("000-7.22", "At start, a journal whose run has no reserve event stops the server with a message naming that journal.", tests=("tests/test_recovery.py::test_a_journal_with_no_reservation_stops_the_server_naming_it",)),
    _r("000-7.23", "At start, an unfinished run whose program, config or runtime version no longer matches its journal stops the server with a message naming each such run.", tests=("tests/test_recovery.py::test_an_unfinished_run_whose_program_changed_stops_the_server_naming_it",)),
    _r("000-7.24", "Settling never gives back a reservation that must stay: a run stopped in doubt is settled only after it is resolved and resumed to an end.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.25", "`staal-supervisor status <manifest>` lists each run waiting for an operator with the operation in doubt and the `staal resolve --journal <path> ...` command to resolve it.", tests=("tests/test_operators.py::test_status_lists_a_waiting_run_with_the_command_that_resolves_it", "tests/test_quickstart.py::test_every_command_of_the_quickstart_runs_and_prints_what_it_shows", "tests/test_worker_deaths.py::test_workers_killed_during_the_new_attempt_leave_the_run_waiting_and_status_names_the_op")),
    _r("000-7.26", "`staal-supervisor status` lists every other unfinished run (in progress, or interrupted and to be resumed at the next start).", tests=("tests/test_operators.py::test_status_lists_a_waiting_run_with_the_command_that_resolves_it",)),
    _r("000-7.27", "`staal-supervisor status` gives each tool's quota use (calls and money within the window).", tests=("tests/test_operators.py::test_status_gives_each_tools_quota_use",)),
    _r("000-7.28", "`staal-supervisor status` reads the ledger without taking the lock or changing any file, so it works while a server is running.", tests=("tests/test_operators.py::test_status_lists_a_waiting_run_with_the_command_that_resolves_it",)),
    _r("000-7.29", "An operator resolves a stopped run with `staal resolve`, unchanged, and the next start of the server resumes it to an end.", tests=("tests/test_operators.py::test_a_waiting_run_resolved_by_an_operator_is_resumed_and_settled_at_the_next_start", "tests/test_stripe.py::test_a_saved_500_keeps_the_run_waiting_and_after_did_not_happen_a_new_key_refunds_once", "tests/test_quickstart.py::test_every_command_of_the_quickstart_runs_and_prints_what_it_shows")),
    _r("000-7.30", "Resolution never travels over MCP in either version: no method or tool lets the client resolve a run, and staal_run_status is read-only.", tests=("tests/test_protocol_tools.py::test_staal_run_status_is_read_only_and_takes_a_run_id",)),
    _r("000-7.31", "The server never answers with input_required, in either protocol version.", tests=("tests/test_protocol_results.py::test_no_outcome_is_ever_answered_as_input_required",)),
    _r("000-7.32", "The caller of a run that waits gets the stopped result and can poll staal_run_status, which reports the run as waiting for an operator.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.33", "When a run stops in doubt, the operator gets waiting/<run id>.json under the journal directory, written once.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.34", "When a run stops in doubt, a line on stderr names the run and says it waits for an operator.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.35", "When a run stops in doubt, the server.notify command is run with the waiting record's path as its argument.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.36", "The notify command is retried with backoff until it exits 0.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.37", "The notify command's environment holds only the variables named in server.notify_env.", tests=("tests/test_operators.py::test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator",)),
    _r("000-7.38", "A notify command that is missing or keeps failing changes nothing else: the waiting record is on disk, status lists it, stderr has it, and the server keeps serving.", tests=("tests/test_operators.py::test_a_notify_command_that_keeps_failing_changes_nothing_else",)),
    _r("000-7.39", "The release notes tell operators to run `staal-supervisor status` and let every unfinished run end (resolving waiting ones) before an upgrade or a tool change.", tests=("tests/test_docs.py::test_the_release_notes_tell_operators_to_let_unfinished_runs_end_before_an_upgrade",)),
    _r("000-7.40", "server.keep is a whole number of days, at least 1, or \"forever\", and defaults to 90; any other value stops the server at start.", tests=("tests/test_manifest.py::test_server_keep_is_whole_days_or_forever", "tests/test_manifest.py::test_server_keep_refuses_anything_else")),
    _r("000-7.41", "At each start and once a day while running, the journal and log of every run settled more than server.keep days ago are deleted.", tests=("tests/test_operators.py::test_retention_deletes_the_log_then_the_journal_of_runs_settled_longer_ago_than_keep",)),
    _r("000-7.42", "With server.keep \"forever\", no journal or log is ever deleted.", tests=("tests/test_operators.py::test_with_keep_forever_nothing_is_ever_deleted",)),
    _r("000-7.43", "A run's log is deleted before its journal, so a failure in between leaves a journal without a log (retried at the next sweep) and never a log without a journal.", tests=("tests/test_operators.py::test_retention_deletes_the_log_then_the_journal_of_runs_settled_longer_ago_than_keep",)),
    _r("000-7.44", "A run that is in progress, unsettled (including waiting for an operator) or holding a once key not yet expired is never deleted, whatever its age.", tests=("tests/test_operators.py::test_retention_deletes_the_log_then_the_journal_of_runs_settled_longer_ago_than_keep",)),
    _r("000-7.45", "Journals are deleted only by the retention sweep; nothing else in the server removes a journal.", tests=("tests/test_operators.py::test_no_outcome_and_no_restart_removes_a_journal",)),
    _r("000-7.46", "staal_run_status answers expired for a run whose journal is gone while its ledger events are still kept.", tests=("tests/test_operators.py::test_run_status_answers_expired_once_the_journal_is_gone_and_unknown_after",)),
    _r("000-7.47", "staal_run_status answers unknown for a run id with no ledger events (never existed, or compacted away).", tests=("tests/test_operators.py::test_run_status_answers_expired_once_the_journal_is_gone_and_unknown_after",)),
    _r("000-7.48", "A worker that dies mid-run is a crash at step 4: the run is resumed in a new worker at most three times, then fails as internal, unless an op may have happened (one attempted again after an operator's did-not-happen included), in which case it waits for an operator and status names the op.", tests=("tests/test_worker_deaths.py::test_workers_killed_during_the_new_attempt_leave_the_run_waiting_and_status_names_the_op", "tests/test_worker_deaths.py::test_giving_up_during_a_new_attempt_after_did_not_happen_makes_the_run_wait", "tests/test_recovery.py::test_a_worker_that_keeps_dying_is_resumed_three_times_then_fails_as_internal")),
    _r("000-7.49", "The supervisor and the worker read a journal with one reader: the ops in doubt, the stop and the usage the supervisor computes for an end it writes are the engine's.", tests=("tests/test_engine_context.py::test_the_journal_read_back_gives_the_usage_the_run_ended_with", "tests/test_worker_deaths.py::test_giving_up_with_nothing_in_doubt_ends_the_run_as_internal_with_the_journals_usage")),
    _r("000-7.50", "`staal journal show` tells a run's whole history in order: each attempt at an op with its key, the stop, the operator's answer and when, the new attempt, the end; a missing file or one that is not a journal is named.", tests=("tests/test_stripe.py::test_journal_show_tells_the_whole_history_of_an_op_an_operator_answered", "tests/test_stripe.py::test_journal_show_names_a_file_that_is_missing_or_is_not_a_journal")),
)


def _split_node_id(node_id: str) -> tuple[str, list[str]] | None:
    """``path::name`` or ``path::Class::...::method``, optional ``[param]`` on the last part."""
    base = node_id
    if base.endswith("]"):
        open_at = base.find("[")
        if open_at == -1:
            return None
        base = base[:open_at]
    parts = base.split("::")
    if len(parts) < 2 or not parts[0] or not all(p.isidentifier() for p in parts[1:]):
        return None
    return parts[0], parts[1:]


def check_test_id(node_id: str, root: Path = PROJECT_ROOT) -> str | None:
    """None if ``node_id`` names a test defined in a file under ``root``; else why not.

    The test module is read with ``ast``, never imported.
    """
    split = _split_node_id(node_id)
    if split is None:
        return f"{node_id!r} is not a node id of the form path::function or path::Class::method"
    rel, names = split
    root = Path(root).resolve()
    path = (root / rel).resolve()
    if path == root or root not in path.parents:
        return f"{rel!r} is outside the project root"
    if path.suffix != ".py" or not path.is_file():
        return f"{rel!r} is not a Python file under {root}"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as e:
        return f"{rel!r} cannot be parsed: {e}"
    body: list[ast.stmt] = tree.body
    for depth, name in enumerate(names):
        last = depth == len(names) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = next((n for n in body if isinstance(n, kinds) and n.name == name), None)
        if found is None:
            what = "function" if last else "class"
            return f"no {what} {name!r} defined in {rel}"
        if not last:
            body = found.body
    return None


def broken_test_ids(requirements: tuple[Requirement, ...] = REQUIREMENTS,
                    root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Every listed test id that does not resolve, mapped to the reason."""
    broken: dict[str, str] = {}
    for req in requirements:
        for node_id in req.tests:
            problem = check_test_id(node_id, root)
            if problem is not None:
                broken[node_id] = problem
    return broken


def summary(requirements: tuple[Requirement, ...] = REQUIREMENTS) -> dict:
    """Counts: total, covered (at least one test), missing, and the same per section."""
    sections: dict[str, dict[str, int]] = {
        s: {"total": 0, "covered": 0, "missing": 0} for s in SECTIONS
    }
    for req in requirements:
        counts = sections.setdefault(req.section, {"total": 0, "covered": 0, "missing": 0})
        counts["total"] += 1
        counts["covered" if req.tests else "missing"] += 1
    total = len(requirements)
    covered = sum(1 for r in requirements if r.tests)
    return {
        "total": total,
        "covered": covered,
        "missing": total - covered,
        "sections": sections,
    }


def main() -> None:
    s = summary()
    print(f"{'section':<28} {'covered':>7} {'missing':>7} {'total':>5}")
    for section, counts in s["sections"].items():
        title = f"{section}. {SECTION_TITLES.get(section, '')}".rstrip()
        print(f"{title:<28} {counts['covered']:>7} {counts['missing']:>7} {counts['total']:>5}")
    print(f"covered {s['covered']} / total {s['total']} (missing {s['missing']})")


if __name__ == "__main__":
    main()
