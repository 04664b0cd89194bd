"""Public API is explicit and exported (that it is documented is checked by tests/docs/test_docs.py)."""

from __future__ import annotations

import importlib

import secagg_dp.accounting as acc

MODULES = [
    "core.rdp",
    "core.events",
    "core.subsampling",
    "core.conversion",
    "core.calibration",
    "core.ledger",
    "core.logspace",
    "core.accountant",
    "core.rdp_accountant",
    "core.pld_accountant",
    "core.interop",
    "checkin.events",
    "checkin.accountant",
    "checkin.mixture",
    "checkin.tails",
    "checkin.bases",
    "checkin.dropout",
    "checkin.local_steps",
    "checkin.observers",
    "checkin.baselines",
    "shuffle.gaussian",
    "shuffle.shuffled_checkin",
    "shuffle.ldp",
    "shuffle.certificates",
]
CLI_MODULES = ["simulations.cli.account", "simulations.cli.account_checkin", "simulations.cli.account_shuffle"]


def test_every_public_name_exists_and_has_docstring():
    for m in MODULES:
        mod = importlib.import_module(f"secagg_dp.accounting.{m}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj):
                assert obj.__doc__, f"{m}.{name} lacks a docstring"
    for name in acc.__all__:
        assert hasattr(acc, name)
    assert len(set(acc.__all__)) == len(acc.__all__)


def test_every_public_function_of_every_module_is_exported():
    # the package namespace covers all three parts (core, check-in, shuffle); module-local names are listed
    local = {
        "DEFAULT_ORDERS",
        "NEIGHBOURING",
        "rdp_to_epsilon",
        "check_orders",
        "register_account",
        "register_calibrate",
    }
    for m in MODULES:
        mod = importlib.import_module(f"secagg_dp.accounting.{m}")
        for name in mod.__all__:
            if name not in local:
                assert name in acc.__all__, f"{m}.{name} not exported by secagg_dp.accounting"


# The names ``secagg_dp.accounting`` exported before the package was split into core/, checkin/ and shuffle/
# (copied from its ``__all__`` at that commit). Users import these; the set may grow, never shrink.
EXPORTED_BEFORE_SPLIT = [
    "DEFAULT_ORDERS",
    "NEIGHBOURING_RELATIONS",
    "check_neighbouring",
    "sum_l2_sensitivity",
    "PrivacyEvent",
    "Gaussian",
    "DiscreteGaussian",
    "DistributedDiscreteGaussian",
    "Skellam",
    "PoissonSampled",
    "SampledWithoutReplacement",
    "Composed",
    "SelfComposed",
    "sampled",
    "gaussian_rdp",
    "discrete_gaussian_rdp",
    "ddg_tau",
    "ddg_rdp",
    "skellam_rdp",
    "log_expm1",
    "log1p_exp",
    "log_comb",
    "log_binomial_sum",
    "integer_rdp_table",
    "wor_subsampled_log_am1",
    "wor_subsampled_rdp",
    "wor_subsampled_gaussian_log_am1",
    "wor_subsampled_gaussian_rdp",
    "poisson_subsampled_gaussian_log_am1",
    "poisson_subsampled_gaussian_rdp",
    "poisson_subsampled_rdp",
    "LargestOrderWarning",
    "rdp_to_dp",
    "rdp_to_dp_mironov",
    "dp_delta",
    "pure_dp_to_rdp",
    "dp_to_rdp",
    "dp_to_rdp_lemma1",
    "calibrate_noise",
    "gaussian_epsilon",
    "calibrate_gaussian_noise_multiplier",
    "RdpAccountant",
    "PrivacyLedger",
    "UnsupportedEventError",
    "register_event_type",
    "BaseMechanism",
    "PerKProvider",
    "SubsampledCheckin",
    "PerKTable",
    "MixtureResult",
    "CheckinCertificate",
    "checkin_mixture",
    "checkin_rdp",
    "checkin_epsilon",
    "window_certificate",
    "GaussianSum",
    "SkellamSum",
    "DDGSum",
    "log_binom_pmf",
    "log_binom_tail_ub",
    "effective_checkin_rate",
    "DropoutStage",
    "staged_checkin_rate",
    "gaussian_composed_epsilon",
    "calibrate_gaussian_multiplier",
    "underdelivered_epsilon",
    "p_versus_gamma",
    "LocalStep",
    "fuse_steps",
    "sum_dominating_step",
    "LocalStepsGaussian",
    "LocalStepsSkellam",
    "LocalStepsDDG",
    "heterogeneous_gaussian_rdp",
    "local_steps_epsilon",
    "calibrate_local_sigma",
    "table1_comparison",
    "analytic_gaussian_epsilon",
    "strong_composition_baseline",
    "chernoff_shortcut_rdp",
    "chernoff_shortcut_epsilon",
    "shuffle_gaussian_rdp",
    "shuffle_gaussian_rdp_partition",
    "shuffle_gaussian_rdp_upper",
    "shuffle_gaussian_log_moments",
    "subsampled_shuffle_gaussian_rdp",
    "shuffled_checkin_gaussian_rdp_chernoff",
    "shuffled_checkin_gaussian_rdp_windowed",
    "shuffled_checkin_gaussian_rdp_pair_lower",
    "binomial_window",
    "LDPResult",
    "fmt_shuffle",
    "subsample_dp",
    "first_cut",
    "first_cut_epsilon",
    "approach_epsilon",
    "seed000_upper_rdp",
    "seed000_lower_rdp",
]


def test_public_set_did_not_shrink():
    missing = [name for name in EXPORTED_BEFORE_SPLIT if name not in acc.__all__ or not hasattr(acc, name)]
    assert not missing, f"secagg_dp.accounting no longer exports {missing}"


def test_subpackages_are_importable_and_reexport_their_modules():
    for room in ("core", "checkin", "shuffle"):
        pkg = importlib.import_module(f"secagg_dp.accounting.{room}")
        assert pkg.__doc__ and "import" in pkg.__doc__, f"{room} lacks a docstring saying what it may import"
        for m in (m for m in MODULES if m.startswith(room + ".")):
            mod = importlib.import_module(f"secagg_dp.accounting.{m}")
            for name in mod.__all__:
                if name != "NEIGHBOURING":
                    assert getattr(pkg, name) is getattr(mod, name), f"{room}.{name} is not {m}.{name}"


def test_cli_modules_register_with_docstrings():
    for m in CLI_MODULES:
        mod = importlib.import_module(m)
        for name in mod.__all__:
            assert getattr(mod, name).__doc__, f"{m}.{name} lacks a docstring"
