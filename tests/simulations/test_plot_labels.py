"""The ε panels say whose certificate they plot (the observer) and at which δ."""

from simulations.plots import epsilon_label, observer_note


def test_epsilon_axis_names_the_observer_and_delta():
    assert epsilon_label({"observer": "analyst", "delta": 1e-5}) == "certified ε, analyst view (δ=1e-05)"
    assert epsilon_label({"observer": "server", "delta": 1e-8}) == "certified ε, server view (δ=1e-08)"
    assert "not who took part" in observer_note({"observer": "analyst", "delta": 1e-5})
    assert "who took part" in observer_note({"observer": "server", "delta": 1e-5})
