"""The KMD's bottom half (a part of :class:`~pydla.kmd.driver.Kmd`): who acts on the device's events,
watches the deadlines, and waits for a job.

- **Threaded devices**: a service thread runs the bottom half, woken by the engine's ISR or at the
  running job's deadline; the thread that raised an interrupt runs it itself when the driver is
  free (:meth:`BottomHalf.irq_thread`, as a threaded interrupt handler does), which saves a thread
  handoff per job.
- **Deterministic and step devices** progress only when polled: whoever calls into the driver
  drives it (:meth:`BottomHalf.drive`), and a waiter polls until its job ends.

A failure of the bottom half itself fails the running job and leaves the driver serving the next
(:attr:`BottomHalf.service_errors` keeps the last ones).

Usage::

    bottom_half = BottomHalf(port, lock, contexts, jobs, cus, owned_lock=None, headed=False, name="kmd0")
    bottom_half.start()             # threaded: the service thread and the interrupt's bottom half
    bottom_half.poll()              # not threaded: act on events, start the next job
    bottom_half.wait_for(job, 1000)
"""

from __future__ import annotations

import threading
import time
from collections import deque

from pydla.errors import DlaError, NvError
from pydla.kmd.context import ContextTable
from pydla.kmd.cu_sched import CuScheduler
from pydla.kmd.job import Job
from pydla.kmd.job_sched import JobScheduler
from pydla.kmd.lock import OwnedLock
from pydla.kmd.port import KmdPortability


class BottomHalf:
    """See the module docstring. ``owned_lock``: the driver's lock when it records its owner (then
    an interrupt raised on a thread inside the driver is left to the service thread); ``headed``:
    the engine runs on the device's microcontroller (block interrupts are its, not the driver's)."""

    def __init__(self, port: KmdPortability, lock: OwnedLock | threading.RLock, contexts: ContextTable,
                 jobs: JobScheduler, cus: CuScheduler, *, owned_lock: OwnedLock | None, headed: bool,
                 name: str) -> None:
        self.port = port
        self.lock = lock
        self.owned_lock = owned_lock
        self.contexts = contexts
        self.jobs = jobs
        self.cus = cus
        self.engine = jobs.engine
        self.shave = jobs.shave
        self.headed = headed
        self.name = name
        self.service_errors: deque[str] = deque(maxlen=64)
        self.service: threading.Thread | None = None

    def start(self) -> None:
        """Threaded devices: the interrupt's bottom half and the service thread."""
        if not self.jobs.threaded:
            return
        # The ISR wakes no one: the interrupt's thread runs the bottom half (irq_thread) and wakes
        # the service thread only when it cannot.
        if self.engine.bottom_half_on_irq:
            self.port.connect_interrupt(self.irq_thread)  # after the engine's ISR
        self.service = threading.Thread(target=self._service_loop, daemon=True, name=self.name)
        self.service.start()

    def disconnect(self) -> None:
        """Under the driver's lock, the driver closing: no interrupt reaches the bottom half."""
        if self.service is not None and self.engine.bottom_half_on_irq:
            self.port.disconnect_interrupt(self.irq_thread)

    def join(self) -> None:
        """After :meth:`disconnect` and the engine's wake: the service thread has ended."""
        if self.service is not None:
            self.service.join(timeout=5)

    def wake(self) -> None:
        """Wake the service thread (a pre-fence moved, work was queued)."""
        self.engine.wake()

    def poll(self) -> None:
        """Process device events, check timeouts, start the next job; on a device that is not
        threaded, drive the compute units' executions too. Never blocks."""
        with self.lock:
            self.jobs.poll_locked()
        self.cus.poll()  # outside the driver's lock: a unit's recovery may take it (a device reset)

    def drive(self) -> None:
        """Without a service thread, whoever calls in drives the driver, so a hang is declared for
        any caller a hung job could block, not only for its waiter (one that gave up just before the
        TDR left the job's buffers Busy for good). Deterministic: a full poll. Step mode (the owner
        steps the device and starts jobs): the raised events and the watchdogs, no job starts."""
        if self.service is not None:
            return  # threaded: the service thread watches the deadlines
        deterministic = self.jobs.polled_at_submit
        with self.lock:
            if self.contexts.closed:
                return
            self.jobs.poll_locked(start=deterministic)
        # outside the driver's lock, as in poll(): a unit's recovery may take it (a device reset)
        if deterministic:
            self.cus.poll()
        else:
            self.cus.check_deadlines()

    def wait_for(self, job: Job, timeout_ms: float | None) -> None:
        """Until ``job`` is done; NvError Timeout after ``timeout_ms`` (None: no limit)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not job.done:
            if self.service is None:
                self.poll()
                if job.done:
                    break
                nap = 0.001 if self.engine.pending_events() + self.shave.pending_events() == 0 else 0.0
            else:
                nap = 0.05
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DlaError(NvError.Timeout,
                                   f"job {job.job_id} did not finish within {timeout_ms} ms "
                                   f"(it is {job.state}; the driver declares a job hung when none of "
                                   f"its operations completes within {self.jobs.watchdog.window_ms(job)} ms)")
                nap = min(nap, left)
            if self.service is None:
                if nap:
                    time.sleep(nap)
            else:
                job.wait_step(nap)

    def irq_thread(self) -> None:
        """Threaded mode, after the ISR: the thread that raised the interrupt (a device block's) runs
        the bottom half itself when the driver is free, as a threaded interrupt handler does; this
        saves a thread handoff per job. It never waits for the driver: when another thread holds it,
        the service thread (woken by the ISR) does the work. Headed, the interrupt may come from a
        thread inside the driver (its doorbell ran the firmware): that thread's own poll, or the
        service thread, takes the events; and block interrupts are the firmware's, not the driver's."""
        owned = self.owned_lock
        if (owned is not None and owned.held_by_caller()) or (self.headed
                                                              and not self.engine.pending_events()):
            # Never the bottom half re-entrantly in the middle of this thread's own driver work (it
            # would reset the tiles a SHAVE list is being started on): the service thread does it.
            self.engine.wake()
            return
        if not self.lock.acquire(blocking=False):
            self.engine.wake()  # the service thread does it
            return
        try:
            if not self.contexts.closed:
                self.jobs.poll_locked()
        except Exception as e:  # as in the service loop: the job fails, the driver goes on
            self.failed(e)
        finally:
            self.lock.release()

    def failed(self, e: Exception) -> None:
        """The bottom half failed with ``e``: noted, and the running job fails."""
        self.service_errors.append(f"{type(e).__name__}: {e}")
        self.jobs.fail_running(e)

    def _service_loop(self) -> None:
        """Threaded mode: the driver's bottom half, acting on events and watching deadlines."""
        contexts = self.contexts
        while not contexts.closed:
            with self.lock:
                job = self.jobs.running
                wait = 0.05 if job is None else max(0.0, min(0.05, job.deadline - time.monotonic()))
            self.engine.wait_for_events(wait)
            if contexts.closed:
                return
            try:
                self.poll()
            except Exception as e:  # the bottom half must outlive any one job's failure
                self.failed(e)
