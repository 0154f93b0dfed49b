import os

# Two cores: the session's torch runs on both, unless pytest-xdist runs two workers (one thread each).
# Subprocess runs of the tests ask for one thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    THREADS = 1
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["GRPO_LAB_REPORT_PROCESSES"] = "1"  # a report's figures drawn in its own process, not a second one
else:
    THREADS = 2
    os.environ.setdefault("OMP_NUM_THREADS", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_lab.config import TrainConfig  # noqa: E402

torch.set_num_threads(THREADS)


@pytest.fixture
def tiny_cfg(tmp_path) -> TrainConfig:
    """A run small enough for a test: 3 levels, 4 prompts a step, groups of 4."""
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=4, prompts_per_step=6, checkpoint_every=2)
    cfg.task.levels = [1, 3, 4]
    cfg.task.train_per_level = 8
    cfg.task.eval_per_level = 4
    cfg.sampler.group_size = 4
    cfg.eval.n = 4
    return cfg


# The heaviest tests (30-110 s each on 2 idle cores: whole torchrun runs under both strategies, kill-and-resume
# of two ranks, a refused sweep resume, disk faults, benchmark smokes) are marked slow here, in one place: with
# them the README's command took 24 minutes, past CI's 20 with the install. `python -m pytest -m slow -n 0`
# runs them; run it before changing what they guard (the distributed strategies, guards, benchmarks).
SLOW = {
    "tests/test_gemma3.py",  # a 268M model of a 262,144-token vocabulary: 7-8 GB and minutes on 2 cores
    "tests/test_distributed.py::test_killed_rank_fails_the_run_and_the_same_command_resumes",
    "tests/test_distributed.py::test_two_rank_replay_keeps_one_buffer_resumes_exactly",
    "tests/test_distributed.py::test_fsdp_run_equals_the_ddp_run",
    "tests/test_distributed.py::test_two_rank_shaped_and_reused_update_equals_one_process[fsdp]",
    "tests/test_distributed.py::test_two_rank_update_equals_one_process_on_the_combined_batch[fsdp]",
    "tests/test_distributed.py::test_two_rank_update_with_ties_masked_and_dropped_equals_one_process[fsdp]",
    "tests/test_distributed.py::test_a_stuck_rank_fails_the_run_after_the_timeout",
    "tests/test_distributed.py::test_fsdp_rollout_gathers_once_and_decodes_without_collectives",
    "tests/test_refused_start.py::test_a_refused_sweep_resume_leaves_the_whole_sweep_as_it_was",
    "tests/test_faults.py::test_a_disk_that_fills_during_a_checkpoint_fails_the_run_and_loses_nothing",
    "tests/test_faults.py::test_a_read_only_run_directory_is_one_line_and_stays_as_it_was",
    "tests/test_benchmarks.py::test_analysis_speed_benchmark_smoke_and_its_guard",
    "tests/test_benchmarks.py::test_speed_regression_benchmark_smoke",
    "tests/test_cli_messages.py::test_evaluate_help_and_config_need_no_run_dir",
    "tests/test_experiments.py::test_submitit_local_sweep_writes_its_report",
    # joblib sweeps of three jobs, a worker signalled mid-run, then the command again (about 2 minutes each)
    "tests/test_killed.py::test_sigterm_to_one_joblib_worker_ends_that_job_only",
    "tests/test_killed.py::test_sigkill_to_a_joblib_worker_is_recorded_by_the_next_start",
    # 10-22 s each on an idle machine, and a case their files test already in CI another way (the other signal,
    # the other samplers across two ranks, the other selections, the integer fuzz): out of CI's time, where a
    # slow machine (1,042 s for the suite, 2026-12-03) took it near its 20 minutes
    "tests/test_killed.py::test_a_signal_records_killed_and_the_same_command_resumes_exactly[15]",
    "tests/test_distributed.py::test_two_rank_run_tables[dynamic-2,3]",
    "tests/test_distributed.py::test_two_rank_run_tables[resample_on_tie-1,4]",
    "tests/test_distributed.py::test_two_rank_runs_of_pods_and_dars_recount[pods-ngrpo]",
    "tests/test_report_selection.py::test_any_key_and_value_ends_in_a_report_or_one_line",
    "tests/test_rewards_fuzz.py::test_latex_scoring_of_hostile_batches_returns_within_the_budget",
    "tests/test_report_incomplete.py::test_a_real_sweep_that_lost_a_job_names_it_with_its_own_overrides",
    # 14-69 s each (2026-12-06, `--durations=40` of a 19.6-minute idle run: past CI's 20 minutes with the install),
    # each a case CI tests another way: the all-tied batch's step on the tiny model (test_tied_batch.py, test_ties_in_
    # loss.py), two-rank resume of the other samplers' state and ar3po's single-rank resume, the config walk
    # in-process and bad values through the CLI (test_cli_messages.py), resume=never on one job, each benchmark's
    # own smoke, the evaluate writer's parts and resume, kill tests of the trainer, two builds of one report
    "tests/test_smollm2.py::test_all_tied_batches_take_the_papers_step_unless_told_to_skip",
    "tests/test_samplers_ar3po.py::test_two_ranks_keep_one_store_and_resume_exactly",
    "tests/test_config_limits.py::test_the_named_cases_through_the_command_line",
    "tests/test_resume_never.py::test_a_sweep_starts_over_and_a_foreign_file_in_one_job_refuses_the_whole_command",
    "tests/test_benchmarks.py::test_speed_check_reads_the_ratio_lines_the_benchmarks_print",
    "tests/test_benchmarks.py::test_profile_step_splits_both_trainers_steps",
    "tests/test_benchmarks.py::test_arms_benchmark_smoke",
    "tests/test_evaluate_writer.py::test_a_killed_evaluation_never_leaves_a_part_missing_or_half_written",
    "tests/test_evaluate_writer.py::test_an_evaluation_too_large_for_the_memory_there_is_is_refused_with_the_numbers",
    "tests/test_evaluate_writer.py::test_two_evaluations_at_once_write_each_part_once",
    "tests/test_experiments.py::test_standalone_evaluation_of_base_and_checkpoints",
    "tests/test_experiments.py::test_a_sweep_of_batch_sizes_at_one_budget_is_compared_at_equal_updates_too",
    "tests/test_scheduler.py::test_two_builds_at_once_in_two_threads_each_use_their_own_second_process",
    "tests/test_report_ownership.py::test_two_builds_into_one_new_folder_at_once_both_finish_with_one_whole_report",
    # 15-46 s each on 2026-12-06's slower VM (the CI tier 17 min 12 s idle, CI's 20 minutes near), each a case CI
    # tests another way: the float copy's mechanism on a GGUF made here (the rest of test_dequantized.py), a killed
    # and resumed run on the tiny model (test_killed.py), adding a task and a sampler from outside (the engine and
    # section cases stay), evaluate's refusals through the command line (test_evaluate_writer.py's one-line values)
    "tests/test_dequantized.py::test_smollm2_loads_from_its_copy_as_from_its_gguf",
    "tests/test_engine_resume.py::test_a_lora_dropout_run_killed_and_resumed_writes_the_uninterrupted_tables",
    "tests/test_extending.py::test_a_task_with_a_key_is_one_module_one_line_one_yaml",
    "tests/test_extending.py::test_a_sampler_is_one_module_one_line_one_yaml",
    "tests/test_cli_messages.py::test_evaluate_refuses_a_missing_run_dir_without_creating_it",
    # and, the tier still 16 min 48 s idle after the moves above, more of 8-28 s each whose files keep sibling cases
    # in CI: two of the evaluate writer's end-to-end runs (its printed numbers, settings and refusals stay), adding
    # an advantage rule (adding an engine and a section stay), two benchmark smokes (study_job's, vs_trl's and the
    # others stay), one multirun (the README's own-study run stays), a packed report rebuilt (test_report_real.py's
    # stays), TRL's summed reward functions (the plain TRL run ingested stays)
    "tests/test_evaluate_writer.py::test_the_run_s_own_settings_fill_its_own_parts_and_resume_is_not_confused",
    "tests/test_evaluate_writer.py::test_rows_go_beside_the_run_s_own_and_record_their_settings",
    "tests/test_extending.py::test_an_advantage_rule_with_a_key_is_one_module_one_line_one_yaml",
    "tests/test_benchmarks.py::test_samplers_benchmark_smoke",
    "tests/test_benchmarks.py::test_length_buckets_benchmark_smoke",
    "tests/test_experiments.py::test_multirun_fixed_vs_adaptive_at_equal_samples",
    "tests/test_report_ownership.py::test_a_packed_report_rebuilds_into_its_own_folder",
    "tests/test_ingest_trl.py::test_two_reward_functions_sum_as_trl_summed_them",
}


# Tests of several seconds to a minute each (real command lines and sweeps in subprocesses, torchrun, the
# SmolLM2 model, report rebuilds), by file or by test, are marked heavy: the README's `python -m pytest -q`
# leaves them out, so a newcomer's first run ends in minutes; CI (.ci/run) runs them all the same, with
# `-m 'not slow'`. Chosen from one idle run's durations (`--durations=0`): the heaviest files whole (their
# module fixtures are paid once a file), then the heaviest tests of the rest.
HEAVY = {
    # whole files: sweeps, torchrun, real command lines, or module fixtures of 10-45 s
    "tests/test_analysis_arms.py",
    "tests/test_analysis_rebuild.py",
    "tests/test_analysis_sources.py",
    "tests/test_benchmarks.py",
    "tests/test_distributed.py",
    "tests/test_gym_task.py::test_a_gym_run_trains_and_records_its_generator",
    "tests/test_experiments.py",
    "tests/test_faults.py",
    "tests/test_refused_start.py",
    "tests/test_report_real.py",
    "tests/test_report_sweep_keys.py",
    "tests/test_smollm2.py",
    "tests/test_tracking.py",
    "tests/test_report_tie_learning.py",
    "tests/test_analysis_ranking.py",
    "tests/test_findings_wording.py",
    "tests/test_analysis_report.py",
    "tests/test_notebook_example.py",
    "tests/test_killed.py",  # command lines stopped by signals, and run again
    "tests/test_resume_never.py",
    "tests/test_safe_loads.py",
    "tests/test_evaluate_writer.py",  # experiments.evaluate's command line, run again and again on a tiny run
    "tests/test_report_words.py",  # synthetic sweeps whose truth is set, each built into a report
    "tests/test_analysis_colours.py",
    "tests/test_unread_keys.py",  # the preflight over every option's keys
    "tests/test_ingest_trl.py",  # real TRL GRPOTrainer runs on CPU, ingested and reported
    "tests/test_extending.py",  # the project copied, a member of each kind added, trained through the command line
    "tests/test_view_browser.py",  # headless chromium on the 221-job sweep's viewer (its build alone: 18 s)
    # single tests of 5-40 s each in files that are otherwise quick
    "tests/test_readme.py::test_your_own_study_runs_as_the_readme_prints_it",
    "tests/test_readme.py::test_the_smollm2_lines_compose_as_printed",
    "tests/test_view.py::test_a_report_built_with_the_viewer_links_it_and_owns_it",
    "tests/test_accumulation.py::test_micro_batches_of_shaped_and_reused_rows_train_to_the_whole_batchs_weights",
    "tests/test_accumulation.py::test_micro_batches_train_to_the_whole_batchs_weights",
    "tests/test_analysis_budget.py::test_pass_at_k_intervals_cover_the_truth_and_match_a_prompt_clustered_bootstrap",
    "tests/test_interval_coverage.py::test_a_built_reports_comparison_carries_the_t_interval_and_no_mde_its_seeds_cannot_reach",
    "tests/test_interval_coverage.py::test_the_old_percentile_bootstrap_over_seeds_undercovers_at_4_seeds",
    "tests/test_interval_coverage.py::test_the_old_bootstrap_undercovers_even_what_it_claimed_to_cover",
    "tests/test_analysis_corruption.py::test_missing_or_empty_folder_is_one_line_and_a_nonzero_exit",
    "tests/test_analysis_corruption.py::test_the_report_is_written_for_the_good_jobs",
    "tests/test_analysis_honesty.py::test_a_sweep_of_two_code_versions_says_which_jobs_ran_which_and_what_changed",
    "tests/test_analysis_honesty.py::test_equal_budgets_say_nothing",
    "tests/test_analysis_honesty.py::test_unequal_budgets_are_said_first_with_the_numbers",
    "tests/test_analysis_honesty.py::test_equal_samples_unequal_tokens_are_said_first_with_where_tokens_are_equal",
    "tests/test_chat.py::test_local_chat_model_end_to_end",
    "tests/test_cli_messages.py::test_a_group_chosen_on_the_command_line_holds_or_is_refused[smollm2_ties-sampler]",
    "tests/test_cli_messages.py::test_a_group_chosen_on_the_command_line_holds_or_is_refused[tie_learning-sampler]",
    "tests/test_cli_messages.py::test_a_single_run_logs_progress_to_its_job_log_and_ends_with_its_numbers",
    "tests/test_cli_messages.py::test_analysis_refuses_missing_and_empty_directories",
    "tests/test_cli_messages.py::test_evaluate_refuses_a_missing_run_dir_without_creating_it",
    "tests/test_committed_reports.py::test_a_committed_report_rebuilds_from_its_data_the_same",
    "tests/test_config_limits.py::test_the_named_cases_through_the_command_line",
    "tests/test_guards.py::test_a_write_fault_is_shown_recorded_and_cleaned_up",
    "tests/test_guards.py::test_the_command_line_says_it_in_one_line",
    "tests/test_learning.py::test_grpo_raises_held_out_accuracy_on_a_middle_level",
    "tests/test_lock.py::test_holders_releasing_under_churn_never_overlap",
    "tests/test_lora.py::test_a_lora_run_trains_only_adapters_resumes_exactly_and_evaluates_from_its_checkpoints",
    "tests/test_scheduler.py::test_a_report_drawn_in_two_processes_is_the_one_drawn_in_one",
    "tests/test_scheduler.py::test_a_figure_that_fails_in_the_second_process_raises_in_the_build",
    "tests/test_scheduler.py::test_a_script_without_a_main_guard_builds_its_report_once",
    "tests/test_scheduler.py::test_two_builds_at_once_in_two_threads_each_use_their_own_second_process",
    "tests/test_rewards_fuzz.py::test_latex_scoring_of_hostile_batches_returns_within_the_budget",
    # 3-5 s each: out of the quick run so that it ends within 6 minutes of a fresh clone, install included
    "tests/test_rewards_fuzz.py::test_the_step_budget_ends_a_stuck_check_and_the_pool_recovers",
    "tests/test_rewards_fuzz.py::test_integer_scoring_never_fails_and_rewards_only_the_integer",
    "tests/test_rewards_fuzz.py::test_latex_near_misses_are_not_rewarded",
    "tests/test_analysis_honesty.py::test_a_tiny_run_says_too_little_data_instead_of_printing_numbers",
    "tests/test_cli_messages.py::test_info_with_a_value_prints_and_runs_nothing",
    "tests/test_cli_messages.py::test_help_lists_every_key_with_its_meaning",
    "tests/test_last_number.py::test_any_text_reads_as_one_of_its_own_tokens",
    "tests/test_lock.py::test_sixty_racing_starts_give_one_holder",
    "tests/test_checkpoints.py::test_resume_stays_exact_with_pruning_and_capped_generation",
    "tests/test_lora.py::test_at_real_shape_only_adapters_change_and_the_reference_is_the_base",
    "tests/test_tiny.py::test_a_wheel_carries_the_weights",
    "tests/test_samplers_adaptive.py::test_resume_mid_run_restores_the_sampler_exactly[reinforce_ada]",
}


def _listed(nodeid: str, names: set[str]) -> bool:
    """Whether a test is named in `names`: by its id, its id without parameters, or its file."""
    return nodeid in names or nodeid.split("[")[0] in names or nodeid.split("::")[0] in names


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _listed(item.nodeid, SLOW):
            item.add_marker(pytest.mark.slow)
        elif _listed(item.nodeid, HEAVY):
            item.add_marker(pytest.mark.heavy)
    # Files with heavy tests first (whole heavy files before the rest): pytest-xdist hands out files in this order, so
    # the long ones start early and the quick ones fill the end, instead of one worker running a long file alone.
    # Each file's tests keep their order.
    rank = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        heavy = 0 if path in HEAVY else 1 if item.get_closest_marker("heavy") else 2
        rank[path] = min(rank.get(path, 2), heavy)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])
