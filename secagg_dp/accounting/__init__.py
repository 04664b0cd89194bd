"""Privacy accounting, in three rooms.

- :mod:`secagg_dp.accounting.core`: events with an explicit neighbouring relation, RDP curves,
  subsampling amplification, log-space kernels, RDP -> (epsilon, delta) conversion, calibration, the
  accountant contract (``PrivacyAccountant``, ``Certificate``) with the RDP and PLD accountants, conversion
  to and from dp-accounting's events, and the persistent ledger. :mod:`secagg_dp.accounting.core.registry`
  maps each method's name to its accountant class (``ACCOUNTANTS``, ``make_accountant``).
- :mod:`secagg_dp.accounting.checkin`: the distributed check-in accountant (binomial mixture, window
  certificate, dropouts, local steps, labelled baselines), built on the core.
- :mod:`secagg_dp.accounting.shuffle`: shuffle Gaussian, shuffled check-in and LDP randomizers under
  shuffling, built on the core.

Imports point one way (checkin -> core, shuffle -> core and the check-in binomial kernels). Every formula
has one implementation, in the core. This package re-exports the public names of all three; names that
differ only by module (``checkin.DEFAULT_ORDERS``, the former name of ``CHECKIN_ORDERS``, each shuffle module's
``NEIGHBOURING``, the check-in adapter ``checkin.rdp_to_epsilon``) stay in their modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and the API reference; at run time each loads on first use
    # Each name is imported `as` itself (PEP 484's explicit re-export): __all__ is computed below, so mypy --strict
    # cannot read it. isort would give every aliased name a statement of its own.
    # isort: off
    from secagg_dp.accounting.checkin.accountant import (
        CHECKIN_METHODS as CHECKIN_METHODS,
        CheckinAccountant as CheckinAccountant,
        CheckinPldAccountant as CheckinPldAccountant,
        CheckinRdpAccountant as CheckinRdpAccountant,
        CheckinWindowAccountant as CheckinWindowAccountant,
        pld_supports as pld_supports,
        tightest_method as tightest_method,
    )
    from secagg_dp.accounting.checkin.baselines import (
        analytic_gaussian_epsilon as analytic_gaussian_epsilon,
        chernoff_shortcut_epsilon as chernoff_shortcut_epsilon,
        chernoff_shortcut_rdp as chernoff_shortcut_rdp,
        strong_composition_baseline as strong_composition_baseline,
    )
    from secagg_dp.accounting.checkin.bases import (
        DDGSum as DDGSum,
        GaussianSum as GaussianSum,
        SkellamSum as SkellamSum,
    )
    from secagg_dp.accounting.checkin.coalition import (
        Coalition as Coalition,
        coalition_certificate as coalition_certificate,
        coalition_view_provider as coalition_view_provider,
    )
    from secagg_dp.accounting.checkin.dropout import (
        PROTOCOL_DROPOUT_STAGES as PROTOCOL_DROPOUT_STAGES,
        ROSTER_DROPOUT_STAGES as ROSTER_DROPOUT_STAGES,
        DropoutStage as DropoutStage,
        calibrate_gaussian_multiplier as calibrate_gaussian_multiplier,
        effective_checkin_rate as effective_checkin_rate,
        gaussian_composed_epsilon as gaussian_composed_epsilon,
        p_versus_gamma as p_versus_gamma,
        staged_checkin_rate as staged_checkin_rate,
        underdelivered_epsilon as underdelivered_epsilon,
    )
    from secagg_dp.accounting.checkin.events import CheckinRound as CheckinRound
    from secagg_dp.accounting.checkin.local_steps import (
        SEED004_LABEL as SEED004_LABEL,
        LocalStep as LocalStep,
        LocalStepsDDG as LocalStepsDDG,
        LocalStepsGaussian as LocalStepsGaussian,
        LocalStepsSkellam as LocalStepsSkellam,
        calibrate_local_sigma as calibrate_local_sigma,
        fuse_steps as fuse_steps,
        heterogeneous_gaussian_rdp as heterogeneous_gaussian_rdp,
        local_steps_epsilon as local_steps_epsilon,
        seed004_joint_noise_rdp as seed004_joint_noise_rdp,
        sum_dominating_step as sum_dominating_step,
        table1_comparison as table1_comparison,
    )
    from secagg_dp.accounting.checkin.mixture import (
        CHECKIN_ORDERS as CHECKIN_ORDERS,
        LEDGER_ORDERS as LEDGER_ORDERS,
        OBSERVERS as OBSERVERS,
        BaseMechanism as BaseMechanism,
        CheckinCertificate as CheckinCertificate,
        MixtureResult as MixtureResult,
        PerKProvider as PerKProvider,
        PerKTable as PerKTable,
        SubsampledCheckin as SubsampledCheckin,
        checkin_epsilon as checkin_epsilon,
        checkin_mixture as checkin_mixture,
        checkin_orders as checkin_orders,
        checkin_rdp as checkin_rdp,
        window_certificate as window_certificate,
    )
    from secagg_dp.accounting.checkin.observers import (
        server_certificate as server_certificate,
        server_ex_post_certificate as server_ex_post_certificate,
        server_ex_post_log_moment as server_ex_post_log_moment,
        server_view_provider as server_view_provider,
    )
    from secagg_dp.accounting.checkin.pld import (
        PLD_OBSERVERS as PLD_OBSERVERS,
        PLDCertificate as PLDCertificate,
        calibrate_checkin_pld as calibrate_checkin_pld,
        checkin_pld as checkin_pld,
        checkin_round_delta as checkin_round_delta,
        epsilon_for_delta as epsilon_for_delta,
        wor_gaussian_delta as wor_gaussian_delta,
    )
    from secagg_dp.accounting.checkin.providers import (
        CHECKIN_MECHANISMS as CHECKIN_MECHANISMS,
        checkin_provider as checkin_provider,
        plan_checkin_provider as plan_checkin_provider,
        plan_enforced_provider as plan_enforced_provider,
    )
    from secagg_dp.accounting.checkin.tails import (
        binom_window_edge as binom_window_edge,
        log_binom_pmf as log_binom_pmf,
        log_binom_tail_ub as log_binom_tail_ub,
    )
    from secagg_dp.accounting.core.accountant import (
        BOUNDS as BOUNDS,
        Certificate as Certificate,
        PrivacyAccountant as PrivacyAccountant,
        check_observer as check_observer,
    )
    from secagg_dp.accounting.core.calibration import (
        calibrate_gaussian_noise_multiplier as calibrate_gaussian_noise_multiplier,
        calibrate_noise as calibrate_noise,
        gaussian_epsilon as gaussian_epsilon,
    )
    from secagg_dp.accounting.core.conversion import (
        LargestOrderWarning as LargestOrderWarning,
        dp_delta as dp_delta,
        dp_to_rdp as dp_to_rdp,
        dp_to_rdp_lemma1 as dp_to_rdp_lemma1,
        pure_dp_to_rdp as pure_dp_to_rdp,
        rdp_to_dp as rdp_to_dp,
        rdp_to_dp_mironov as rdp_to_dp_mironov,
    )
    from secagg_dp.accounting.core.events import (
        NEIGHBOURING_RELATIONS as NEIGHBOURING_RELATIONS,
        Composed as Composed,
        DiscreteGaussian as DiscreteGaussian,
        DistributedDiscreteGaussian as DistributedDiscreteGaussian,
        Gaussian as Gaussian,
        PoissonSampled as PoissonSampled,
        PrivacyEvent as PrivacyEvent,
        SampledWithoutReplacement as SampledWithoutReplacement,
        SelfComposed as SelfComposed,
        Skellam as Skellam,
        check_neighbouring as check_neighbouring,
        sampled as sampled,
        sum_l2_sensitivity as sum_l2_sensitivity,
    )
    from secagg_dp.accounting.core.interop import (
        dp_neighboring_relation as dp_neighboring_relation,
        from_dp_event as from_dp_event,
        to_dp_event as to_dp_event,
    )
    from secagg_dp.accounting.core.ledger import (
        LedgerError as LedgerError,
        PrivacyLedger as PrivacyLedger,
        RdpAccountant as RdpAccountant,
        UnsupportedEventError as UnsupportedEventError,
        register_event_type as register_event_type,
    )
    from secagg_dp.accounting.core.logspace import (
        log1p_exp as log1p_exp,
        log_binomial_sum as log_binomial_sum,
        log_comb as log_comb,
        log_expm1 as log_expm1,
    )
    from secagg_dp.accounting.core.pairs import (
        wor_gaussian_pair_log_am1 as wor_gaussian_pair_log_am1,
        wor_gaussian_pair_rdp as wor_gaussian_pair_rdp,
    )
    from secagg_dp.accounting.core.pld_accountant import PLDAccountant as PLDAccountant
    from secagg_dp.accounting.core.rdp import (
        DEFAULT_ORDERS as DEFAULT_ORDERS,
        ddg_rdp as ddg_rdp,
        ddg_tau as ddg_tau,
        discrete_gaussian_rdp as discrete_gaussian_rdp,
        gaussian_rdp as gaussian_rdp,
        skellam_rdp as skellam_rdp,
    )
    from secagg_dp.accounting.core.registry import ACCOUNTANTS as ACCOUNTANTS, make_accountant as make_accountant
    from secagg_dp.accounting.core.subsampling import (
        integer_rdp_table as integer_rdp_table,
        poisson_subsampled_gaussian_log_am1 as poisson_subsampled_gaussian_log_am1,
        poisson_subsampled_gaussian_rdp as poisson_subsampled_gaussian_rdp,
        poisson_subsampled_rdp as poisson_subsampled_rdp,
        revealed_participation_rdp as revealed_participation_rdp,
        wor_subsampled_gaussian_log_am1 as wor_subsampled_gaussian_log_am1,
        wor_subsampled_gaussian_rdp as wor_subsampled_gaussian_rdp,
        wor_subsampled_log_am1 as wor_subsampled_log_am1,
        wor_subsampled_rdp as wor_subsampled_rdp,
    )
    from secagg_dp.accounting.shuffle.certificates import (
        LDP_SHUFFLE_BOUNDS as LDP_SHUFFLE_BOUNDS,
        SHUFFLE_BOUNDS as SHUFFLE_BOUNDS,
        LDPShuffleRound as LDPShuffleRound,
        ShuffleAccountant as ShuffleAccountant,
        ShuffleRound as ShuffleRound,
        shuffle_certificate as shuffle_certificate,
    )
    from secagg_dp.accounting.shuffle.gaussian import (
        shuffle_gaussian_log_moments as shuffle_gaussian_log_moments,
        shuffle_gaussian_rdp as shuffle_gaussian_rdp,
        shuffle_gaussian_rdp_partition as shuffle_gaussian_rdp_partition,
        shuffle_gaussian_rdp_upper as shuffle_gaussian_rdp_upper,
    )
    from secagg_dp.accounting.shuffle.ldp import (
        LDPResult as LDPResult,
        approach_epsilon as approach_epsilon,
        first_cut as first_cut,
        first_cut_epsilon as first_cut_epsilon,
        fmt_shuffle as fmt_shuffle,
        seed000_lower_rdp as seed000_lower_rdp,
        seed000_upper_rdp as seed000_upper_rdp,
        subsample_dp as subsample_dp,
    )
    from secagg_dp.accounting.shuffle.shuffled_checkin import (
        binomial_window as binomial_window,
        shuffled_checkin_gaussian_rdp_chernoff as shuffled_checkin_gaussian_rdp_chernoff,
        shuffled_checkin_gaussian_rdp_pair_lower as shuffled_checkin_gaussian_rdp_pair_lower,
        shuffled_checkin_gaussian_rdp_windowed as shuffled_checkin_gaussian_rdp_windowed,
        subsampled_shuffle_gaussian_rdp as subsampled_shuffle_gaussian_rdp,
    )
    # isort: on


# module -> the names this package takes from it: the imports above, for the run-time loader below and for
# __all__ (tests/test_public_api.py checks that the two lists agree)
_EXPORTS = {
    "checkin.accountant": (
        "CHECKIN_METHODS CheckinAccountant CheckinPldAccountant CheckinRdpAccountant CheckinWindowAccountant "
        "pld_supports tightest_method"
    ),
    "checkin.baselines": (
        "analytic_gaussian_epsilon chernoff_shortcut_epsilon chernoff_shortcut_rdp strong_composition_baseline"
    ),
    "checkin.bases": "DDGSum GaussianSum SkellamSum",
    "checkin.dropout": (
        "PROTOCOL_DROPOUT_STAGES ROSTER_DROPOUT_STAGES DropoutStage calibrate_gaussian_multiplier "
        "effective_checkin_rate gaussian_composed_epsilon p_versus_gamma staged_checkin_rate underdelivered_epsilon"
    ),
    "checkin.events": "CheckinRound",
    "checkin.local_steps": (
        "SEED004_LABEL LocalStep LocalStepsDDG LocalStepsGaussian LocalStepsSkellam calibrate_local_sigma "
        "fuse_steps heterogeneous_gaussian_rdp local_steps_epsilon seed004_joint_noise_rdp "
        "sum_dominating_step table1_comparison"
    ),
    "checkin.mixture": (
        "CHECKIN_ORDERS LEDGER_ORDERS OBSERVERS BaseMechanism CheckinCertificate MixtureResult PerKProvider PerKTable "
        "SubsampledCheckin checkin_epsilon checkin_mixture checkin_orders checkin_rdp window_certificate"
    ),
    "checkin.coalition": "Coalition coalition_certificate coalition_view_provider",
    "checkin.observers": (
        "server_certificate server_ex_post_certificate server_ex_post_log_moment server_view_provider"
    ),
    "checkin.pld": (
        "PLD_OBSERVERS PLDCertificate calibrate_checkin_pld checkin_pld checkin_round_delta epsilon_for_delta "
        "wor_gaussian_delta"
    ),
    "checkin.providers": "CHECKIN_MECHANISMS checkin_provider plan_checkin_provider plan_enforced_provider",
    "checkin.tails": "binom_window_edge log_binom_pmf log_binom_tail_ub",
    "core.accountant": "BOUNDS Certificate PrivacyAccountant check_observer",
    "core.calibration": "calibrate_gaussian_noise_multiplier calibrate_noise gaussian_epsilon",
    "core.conversion": (
        "LargestOrderWarning dp_delta dp_to_rdp dp_to_rdp_lemma1 pure_dp_to_rdp rdp_to_dp rdp_to_dp_mironov"
    ),
    "core.events": (
        "NEIGHBOURING_RELATIONS Composed DiscreteGaussian DistributedDiscreteGaussian Gaussian PoissonSampled "
        "PrivacyEvent SampledWithoutReplacement SelfComposed Skellam check_neighbouring sampled "
        "sum_l2_sensitivity"
    ),
    "core.interop": "dp_neighboring_relation from_dp_event to_dp_event",
    "core.ledger": "LedgerError PrivacyLedger RdpAccountant UnsupportedEventError register_event_type",
    "core.logspace": "log1p_exp log_binomial_sum log_comb log_expm1",
    "core.pairs": "wor_gaussian_pair_log_am1 wor_gaussian_pair_rdp",
    "core.pld_accountant": "PLDAccountant",
    "core.rdp": "DEFAULT_ORDERS ddg_rdp ddg_tau discrete_gaussian_rdp gaussian_rdp skellam_rdp",
    "core.subsampling": (
        "integer_rdp_table poisson_subsampled_gaussian_log_am1 poisson_subsampled_gaussian_rdp "
        "poisson_subsampled_rdp revealed_participation_rdp wor_subsampled_gaussian_log_am1 "
        "wor_subsampled_gaussian_rdp wor_subsampled_log_am1 wor_subsampled_rdp"
    ),
    "core.registry": "ACCOUNTANTS make_accountant",
    "shuffle.certificates": "SHUFFLE_BOUNDS LDP_SHUFFLE_BOUNDS LDPShuffleRound ShuffleAccountant ShuffleRound "
    "shuffle_certificate",
    "shuffle.gaussian": (
        "shuffle_gaussian_log_moments shuffle_gaussian_rdp shuffle_gaussian_rdp_partition shuffle_gaussian_rdp_upper"
    ),
    "shuffle.ldp": (
        "LDPResult approach_epsilon first_cut first_cut_epsilon fmt_shuffle seed000_lower_rdp "
        "seed000_upper_rdp subsample_dp"
    ),
    "shuffle.shuffled_checkin": (
        "binomial_window shuffled_checkin_gaussian_rdp_chernoff shuffled_checkin_gaussian_rdp_pair_lower "
        "shuffled_checkin_gaussian_rdp_windowed subsampled_shuffle_gaussian_rdp"
    ),
}
_SOURCE = {name: f"{__name__}.{module}" for module, names in _EXPORTS.items() for name in names.split()}
__all__ = list(_SOURCE)
_ROOMS = ("checkin", "core", "shuffle")


def __getattr__(name: str) -> Any:
    """A public name is imported from its module on first use (PEP 562), so that importing one module of a
    room (as ``secagg-dp account checkin`` does) does not import every accountant, the ledger and the shuffle
    model; the rooms themselves load the same way."""
    if name in _ROOMS:
        return importlib.import_module(f"{__name__}.{name}")
    module = _SOURCE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
