from slurmpod.domain.slurm_release import (
    SlurmRelease,
    is_major_upgrade,
    major_of,
    max_jump,
    mix_problem,
    primary_reclaim_blocks_clients,
    releases_between,
    upgrade_problem,
)


def test_major_of_package_versions() -> None:
    assert major_of("24.11.5-4+deb13u1") == SlurmRelease(24, 11)
    assert major_of("22.05.8-4+deb12u3") == SlurmRelease(22, 5)
    assert str(major_of("22.05.8")) == "22.05"
    assert major_of("") is None and major_of("unknown") is None


def test_release_distance_follows_the_release_sequence() -> None:
    assert releases_between(SlurmRelease(22, 5), SlurmRelease(24, 11)) == 4
    assert releases_between(SlurmRelease(23, 11), SlurmRelease(24, 11)) == 2
    assert releases_between(SlurmRelease(24, 11), SlurmRelease(22, 5)) == -4
    assert releases_between(SlurmRelease(25, 11), SlurmRelease(26, 5)) == 1  # after the known list
    assert releases_between(SlurmRelease(25, 11), SlurmRelease(26, 11)) == 2


def test_upgrade_rules() -> None:
    assert upgrade_problem("24.11.5", "24.11.6") is None  # same major release
    assert upgrade_problem("23.11.1", "24.11.5") is None  # two releases
    msg = upgrade_problem("22.05.8-4+deb12u3", "24.11.5-4+deb13u1")
    assert msg is not None and "22.05" in msg and "24.11" in msg and "at most 3" in msg
    down = upgrade_problem("24.11.5", "22.05.8")
    assert down is not None and "downgraded" in down and "22.05" in down and "24.11" in down
    assert upgrade_problem("", "24.11.5") is None  # unknown version: not judged
    assert is_major_upgrade("24.05.1", "24.11.5") and not is_major_upgrade("24.11.1", "24.11.5")


def test_workers_may_lag_controllers_by_two_releases_never_lead() -> None:
    assert mix_problem("24.11.5", "24.11.5") is None
    assert mix_problem("24.11.5", "24.05.2") is None
    assert "newer" in (mix_problem("22.05.8", "24.11.5") or "")
    assert "older" in (mix_problem("24.11.5", "22.05.8") or "")


def test_primary_reclaim_blocks_clients_after_22_05() -> None:
    assert primary_reclaim_blocks_clients("24.11.5-4+deb13u1")
    assert primary_reclaim_blocks_clients("23.02.7")  # not tried: the careful way
    assert not primary_reclaim_blocks_clients("22.05.8-4+deb12u3")
    assert not primary_reclaim_blocks_clients("")  # unknown (host-root nodes): as before


def test_the_window_is_three_releases_from_24_11_two_before() -> None:
    assert max_jump(SlurmRelease(24, 5)) == 2 and max_jump(SlurmRelease(24, 11)) == 3
    assert max_jump(SlurmRelease(26, 5)) == 3
    assert releases_between(SlurmRelease(24, 11), SlurmRelease(26, 5)) == 3
    assert upgrade_problem("24.11.5-4+deb13u1", "26.05.1-1") is None  # 25.05, 25.11, 26.05: permitted
    assert upgrade_problem("24.05.1", "25.11.2") is None  # three releases to 25.11
    two_only = upgrade_problem("22.05.8", "24.05.1")  # three releases to 24.05: its window is two
    assert two_only is not None and "22.05" in two_only and "24.05" in two_only and "at most 2" in two_only
    for old, new in (("22.05.8-4+deb12u3", "24.11.5-4+deb13u1"), ("22.05.8-4+deb12u3", "26.05.1-1")):
        msg = upgrade_problem(old, new)
        assert msg is not None and old[:5] in msg and new[:5] in msg, msg
    down = upgrade_problem("26.05.1-1", "24.11.5-4+deb13u1")
    assert down is not None and "downgraded" in down and "26.05" in down and "24.11" in down
    assert is_major_upgrade("24.11.5", "26.05.1")
    assert upgrade_problem("24.11.5", "26.11.1") is not None  # four releases


def test_controllers_from_24_11_accept_workers_three_releases_older() -> None:
    assert mix_problem("26.05.1", "24.11.5") is None
    assert mix_problem("24.11.5", "23.11.2") is None
    assert "older" in (mix_problem("24.05.1", "22.05.8") or "")
    assert "older" in (mix_problem("26.05.1", "24.05.2") or "")
