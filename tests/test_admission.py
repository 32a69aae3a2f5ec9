"""This process's device (attnlab/admission.py): one run at a time, builds between runs, memory refusals.

On the H200 a process aborted when a thread ran a program while two others compiled
(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); these tests hold one side and check the other waits.
"""

import threading
import time

import jax
import pytest

from attnlab import admission, settings
from attnlab.admission import DEVICE, Device, DeviceBusy, OverBudget
from attnlab.budget import Budget
from attnlab.measure import compiled

MIB = 2**20


def _device(device=100 * MIB, host=100 * MIB, shared=False, **kw):
    return Device(Budget(device, host, shared, "a test's budget"), **kw)


_HOLDING: list[tuple[threading.Thread, threading.Event]] = []  # each test's holders, let go and joined after it


@pytest.fixture(autouse=True)
def _holders_let_go():
    """A holder's thread outlives `release.set()` by a moment: joined here, so no test begins with another's turn
    still held (Python's switch interval, threads.held_turn, is the process's)."""
    yield
    while _HOLDING:
        thread, release = _HOLDING.pop()
        release.set()
        thread.join(10)


def _held(d, build: bool = False):
    """A run (or a build) that holds `d` in a thread of its own until the returned event is set."""
    holding, release = threading.Event(), threading.Event()

    def hold():
        with d.building() if build else d.use():
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    _HOLDING.append((thread, release))
    thread.start()
    assert holding.wait(10)
    return release


def _started(fn):
    done = threading.Event()

    def body():
        fn()
        done.set()

    threading.Thread(target=body, daemon=True).start()
    return done


def test_runs_use_the_device_one_at_a_time_in_order_of_arrival():
    d = _device()
    inside, overlap, order = [], [], []

    def run(i):
        with d.use(device_bytes=MIB):
            inside.append(1)
            overlap.append(len(inside))
            order.append(i)
            time.sleep(0.05)
            inside.pop()

    # the six arrive while the device is held, each once the one before is in line (20 ms apart raced on a busy CI)
    release, threads = _held(d), []
    for i in range(6):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while d.waiting < i + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    release.set()
    [t.join(10) for t in threads]
    assert overlap == [1] * 6 and order == list(range(6))
    assert d.stats.admitted == 7 and d.stats.waited >= 6 and d.stats.busy_s >= 0.3


def test_the_line_names_the_holder_then_the_runs_waiting_in_the_order_they_will_go():
    """Device.line: what a page's "yours is 2nd in the device's line" is read from; builds wait apart (they take no
    turn of their own) and, once admitted between runs, are named as compiling."""
    d = _device()
    assert d.line() == admission.Line(None, (), (), ())
    runs, builds = [], []
    release = _held(d)

    def wait_to_run(i):
        runs.append((i, threading.get_ident()))
        with d.use():
            pass

    def wait_to_build():
        builds.append(threading.get_ident())
        with d.building():
            time.sleep(0.6)

    def in_line(n: int) -> None:  # each arrives once the one before is in line (fixed sleeps raced on a busy CI)
        deadline = time.monotonic() + 10
        while len(d.line().runs) + len(d.line().builds) < n and time.monotonic() < deadline:
            time.sleep(0.005)

    done = []
    for i in range(3):
        done.append(_started(lambda i=i: wait_to_run(i)))
        in_line(len(done))
        if i == 0:
            done.append(_started(wait_to_build))
            in_line(len(done))
    now = d.line()
    assert now.holder is not None and now.holder not in now.runs and now.building == ()
    assert now.runs == tuple(t for _, t in sorted(runs)) and now.builds == tuple(builds)
    release.set()
    # the first run goes, then the build that came before the other two compiles, alone on the line (for 0.6 s)
    expected, deadline = admission.Line(None, tuple(t for i, t in sorted(runs) if i), (), tuple(builds)), time.monotonic() + 5
    while d.line() != expected and time.monotonic() < deadline:
        time.sleep(0.005)
    assert d.line() == expected
    assert all(e.wait(10) for e in done) and d.line() == admission.Line(None, (), (), ())


def test_a_compile_pools_build_is_named_for_its_request_and_leaves_the_line_when_that_request_is_abandoned():
    """compiled.compile_many builds in pool threads: building_for names each build by the request's thread in
    Device.line (so a page finds its own compile) and `abandon` of that request takes its builds off the line."""
    from attnlab.admission import Abandoned

    d, request_thread, raised = _device(), 12345, []
    release = _held(d)

    def pool_build():
        with d.building_for(request_thread):
            try:
                with d.building():
                    pass
            except Abandoned as e:
                raised.append(e)

    done = _started(pool_build)
    time.sleep(0.1)
    assert d.line().builds == (request_thread,)
    d.abandon([request_thread])
    assert done.wait(5) and len(raised) == 1 and d.line().builds == ()
    release.set()


def test_a_run_bigger_than_the_whole_budget_is_refused_at_once_with_a_sentence():
    d = _device(device=10 * MIB)
    with pytest.raises(OverBudget, match="GPU memory, over this lab's budget of 10.00 MiB \\(a test's budget\\)"):
        with d.use(device_bytes=11 * MIB):
            pass
    assert d.stats.admitted == 0


def test_on_the_cpu_backend_device_bytes_count_against_host_memory():
    d = _device(device=100 * MIB, host=50 * MIB, shared=True)
    assert "memory" in d.check(60 * MIB, 0)
    with pytest.raises(OverBudget):
        with d.use(device_bytes=30 * MIB, host_bytes=30 * MIB):
            pass
    with d.use(device_bytes=20 * MIB, host_bytes=10 * MIB):
        pass
    assert d.stats.peak_host_bytes == 30 * MIB


def test_the_holder_passes_through_and_a_full_queue_is_refused():
    d = _device(max_waiting=0)
    with d.use():
        with d.use():  # a timing inside a run on the same thread: no second wait
            pass
        errors = []

        def other():
            try:
                with d.use(timeout_s=0.1):
                    errors.append(None)
            except DeviceBusy as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert isinstance(errors[0], DeviceBusy) and "already waiting" in str(errors[0])


def test_a_wait_that_times_out_says_so():
    d = _device()
    out = []

    def enter():
        with d.use(timeout_s=0.05):
            pass

    with d.use():
        t = threading.Thread(target=lambda: out.append(pytest.raises(DeviceBusy, enter)))
        t.start()
        t.join()
    assert "without getting it" in str(out[0].value)
    assert d.stats.waited == 1 and d.waiting == 0


def test_the_budget_from_the_settings_and_where_it_comes_from():
    with settings.override(memory_limit_gib=0.5):
        b = Budget.here()
    assert b.host_bytes == 2**29
    assert "ATTNLAB_MEMORY_LIMIT_GIB" in b.check(2**30, 2**30)


def test_a_compile_waits_while_a_run_holds_the_device():
    program = (lambda x: x * 7.0 - 1.0), [jax.ShapeDtypeStruct((13,), "float32")]
    with DEVICE.use():
        done = _started(lambda: compiled.compile_timed(*program, "test"))
        assert not done.wait(0.5), "a compile ran while a run held the device"
    assert done.wait(60)


def test_a_run_waits_for_a_build_in_flight_and_goes_before_builds_that_come_after_it():
    d = _device()
    release = _held(d, build=True)
    ran = []

    def a_run():
        with d.use():
            ran.append("run")

    def a_later_build():
        with d.building():
            ran.append("later build")

    run = _started(a_run)
    time.sleep(0.1)  # the run waits first
    later = _started(a_later_build)
    assert not run.wait(0.3), "a run started while a program was being built"
    release.set()
    assert run.wait(10) and later.wait(10)
    assert ran == ["run", "later build"]


def test_builds_go_side_by_side():
    d = _device()
    inside, peak = [0], [0]
    lock = threading.Lock()

    def build():
        with d.building():
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.1)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=build) for _ in range(4)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert peak[0] > 1


def test_the_holder_compiles_what_it_needs_without_waiting_for_itself():
    done = threading.Event()

    def hold_and_compile():
        with DEVICE.use():
            compiled.compile_timed(lambda x: x + 11.0, [jax.ShapeDtypeStruct((17,), "float32")], "test")
        done.set()

    threading.Thread(target=hold_and_compile, daemon=True).start()
    assert done.wait(60)


def test_a_builder_that_asks_for_the_device_is_told_instead_of_waiting_forever():
    d = _device()
    with d.building(), pytest.raises(RuntimeError, match="cannot wait for the device"):
        with d.use():
            pass


def test_a_quiet_build_neither_waits_for_a_run_nor_holds_one_up():
    """A program compiled without autotuning launches nothing on the device: it compiles beside a run, and a
    run does not wait for it (the turns are for compiles whose autotuner runs kernels)."""
    dev = Device(Budget(1 << 40, 1 << 40, False))
    held, release, done = threading.Event(), threading.Event(), []

    def run():
        with dev.use():
            held.set()
            release.wait(30)

    t = threading.Thread(target=run)
    t.start()
    held.wait(10)
    with dev.building(quiet=True):  # the device is held: a quiet build goes on
        done.append("built")
    release.set()
    t.join(10)
    with dev.building(quiet=True):  # and a run in its middle is not held up by it
        with dev.use():
            done.append("ran")
    assert done == ["built", "ran"]


def test_programs_compiled_without_autotuning_build_quietly_and_tuned_ones_take_turns():
    seen = []
    real = DEVICE.building

    def spy(quiet=False, what=""):
        seen.append(quiet)
        return real(quiet, what)

    DEVICE.building = spy
    try:
        compiled.compile_timed(lambda x: x * 5.0, [jax.ShapeDtypeStruct((3,), "float32")], "test", None)
        compiled.compile_timed(lambda x: x * 7.0, [jax.ShapeDtypeStruct((3,), "float32")], "test",
                               compiled.CHECK_OPTIONS)
    finally:
        DEVICE.building = real
    assert seen[0] is False and seen[-1] is True


def _in_line(d, runs=0, builds=0):
    """Wait until the line holds this many runs and builds (a fixed sleep raced on a busy CI)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = d.line()
        if len(line.runs) >= runs and len(line.builds) >= builds:
            return
        time.sleep(0.005)
    raise AssertionError(f"the line never held {runs} runs and {builds} builds: {d.line()}")


def test_a_build_goes_before_the_runs_that_come_after_it():
    """One line for runs and builds: a build that waits behind a run is not passed by runs that arrive later (a
    class's stream of runs kept tuned builds waiting, and so every timing)."""
    d = _device()
    release = _held(d)
    order = []

    def a_build():
        with d.building():
            order.append("build")

    def a_later_run():
        with d.use():
            order.append("later run")

    build = _started(a_build)
    _in_line(d, builds=1)  # the build waits first
    later = _started(a_later_run)
    _in_line(d, runs=1, builds=1)
    release.set()
    assert build.wait(10) and later.wait(10)
    assert order == ["build", "later run"]


def test_builds_in_line_go_together_past_the_runs_between_them():
    """Phase-fair: when a build reaches the head of the line, every build waiting goes side by side, so builds
    between a class's runs cost one build phase, not one each; the run between them waits for that phase."""
    d = _device()
    release = _held(d)
    order, inside, peak, lock = [], [0], [0], threading.Lock()

    def a_build(name):
        with d.building():
            with lock:
                order.append(name)
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    def a_run():
        with d.use():
            order.append("run")

    first = _started(lambda: a_build("first build"))
    _in_line(d, builds=1)
    run = _started(a_run)
    _in_line(d, runs=1, builds=1)
    second = _started(lambda: a_build("second build"))
    _in_line(d, runs=1, builds=2)
    assert d.waiting == 1
    release.set()
    assert first.wait(10) and run.wait(10) and second.wait(10)
    assert order[-1] == "run" and peak[0] == 2, order


def test_a_run_that_gives_up_waiting_leaves_the_line_to_the_next():
    d = _device()
    release = _held(d)
    with pytest.raises(DeviceBusy, match="without getting it"):
        with d.use(timeout_s=0.1):
            pass
    built = _started(lambda: d.building().__enter__())
    release.set()
    assert built.wait(10) and d.waiting == 0


def test_a_requests_ledger_says_how_long_it_waited_for_the_device_and_how_long_it_held_it():
    d = _device()
    release = _held(d)
    threading.Timer(0.3, release.set).start()
    with d.ledger() as spent:
        with d.use():
            time.sleep(0.2)
        with d.building():
            time.sleep(0.1)
    assert 0.25 < spent["run_wait_s"] < 5 and 0.15 < spent["run_s"] < 5, spent
    assert 0.05 < spent["build_s"] < 5 and spent["build_wait_s"] < 0.1, spent
    with d.use():  # no ledger kept outside one: nothing to count into
        pass
    assert spent["run_s"] < 5


def test_a_build_phase_takes_at_most_max_builds_and_the_runs_that_waited_go_before_the_next():
    """A run that arrives during a build phase waits for that phase only, not for every build in line behind it
    (a 10 ms check waited 5-10 s for phases of every tuned compile in line on the H200)."""
    d = _device(max_builds=2)
    release = _held(d)
    order, lock = [], threading.Lock()

    def a_build(name):
        with d.building():
            with lock:
                order.append(name)
            time.sleep(0.5)

    def a_run():
        with d.use():
            order.append("run")

    builds = []
    for i in range(3):  # each in line before the next starts (thread start order alone raced on CI at e47d9d3)
        builds.append(_started(lambda i=i: a_build(f"build {i}")))
        deadline = time.monotonic() + 10
        while len(d.line().builds) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    release.set()  # builds 0 and 1 go together; build 2 waits for the next phase
    deadline = time.monotonic() + 10
    while len(order) < 2 and time.monotonic() < deadline:  # the first phase under way (a sleep alone raced on a busy CI)
        time.sleep(0.01)
    run = _started(a_run)  # arrives during the first phase, after build 2
    assert run.wait(10) and all(b.wait(10) for b in builds)
    assert sorted(order[:2]) == ["build 0", "build 1"] and order[2:] == ["run", "build 2"], order


def test_an_abandoned_run_leaves_the_line_with_a_busy_sentence_and_the_next_run_goes():
    from attnlab.admission import Abandoned

    d = _device()
    release = _held(d)
    errors, order, threads = [], [], {}

    def run(name):
        threads[name] = threading.get_ident()
        try:
            with d.use():
                order.append(name)
        except DeviceBusy as e:  # what a page shows: Abandoned is a busy answer
            errors.append((name, e))

    gone, live = _started(lambda: run("gone")), _started(lambda: run("live"))
    deadline = time.monotonic() + 10
    while d.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    d.abandon([threads["gone"]])
    assert gone.wait(5) and not live.is_set()  # left the line while the device was still held
    assert [(n, type(e)) for n, e in errors] == [("gone", Abandoned)] and "closed" in str(errors[0][1])
    release.set()
    assert live.wait(10) and order == ["live"] and d.waiting == 0


def test_an_abandoned_build_leaves_the_line_too():
    from attnlab.admission import Abandoned

    d = _device()
    release, errors, thread = _held(d), [], []

    def build():
        thread.append(threading.get_ident())
        try:
            with d.building():
                pass
        except Abandoned as e:
            errors.append(e)

    done = _started(build)
    deadline = time.monotonic() + 10
    while not d._line and time.monotonic() < deadline:
        time.sleep(0.01)
    d.abandon(thread)
    assert done.wait(5) and "build" in str(errors[0]) and not d._line
    release.set()


def test_a_turn_shortens_pythons_switch_interval_while_it_holds_the_device_and_puts_it_back():
    """threads.held_turn inside Device.use: ATTNLAB_TURN_SWITCH_S while a run holds the device, Python's own before
    and after (and in a build); 0 leaves it alone."""
    import sys

    d, before = _device(), sys.getswitchinterval()
    with settings.override(turn_switch_s=0.0001):
        with d.use():
            assert sys.getswitchinterval() == pytest.approx(0.0001)
            with d.use():  # the holder's own inner turn
                assert sys.getswitchinterval() == pytest.approx(0.0001)
            assert sys.getswitchinterval() == pytest.approx(0.0001)
        assert sys.getswitchinterval() == before
        with d.building():
            assert sys.getswitchinterval() == before
    with settings.override(turn_switch_s=0.0), d.use():
        assert sys.getswitchinterval() == before


def test_the_switch_interval_in_turns_is_a_setting_and_a_bad_one_is_said():
    from attnlab.settings import Settings

    assert Settings.from_env({}).turn_switch_s == 0.0001
    assert Settings.from_env({"ATTNLAB_TURN_SWITCH_S": "0"}).turn_switch_s == 0.0
    bad = Settings.from_env({"ATTNLAB_TURN_SWITCH_S": "fast"})
    assert bad.turn_switch_s == 0.0001 and "ATTNLAB_TURN_SWITCH_S='fast' is not a number of seconds" in " ".join(bad.problems)


def test_two_devices_held_at_once_put_pythons_switch_interval_back_when_the_last_lets_go():
    import sys

    a, b, before = _device(), _device(), sys.getswitchinterval()
    with settings.override(turn_switch_s=0.0001):
        release_a = _held(a)
        release_b = _held(b)
        release_a.set()
        time.sleep(0.2)
        assert sys.getswitchinterval() == pytest.approx(0.0001)  # b still holds its device
        release_b.set()
        time.sleep(0.2)
    assert sys.getswitchinterval() == before
