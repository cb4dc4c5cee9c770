"""How a blocking `Client` runs its async core: one event loop, owned by the client.

Every blocking call is one coroutine of the async core run to completion on that loop:

* where the calling thread runs no event loop (scripts, jobs, the CLI), the loop is driven
  right here (`run_until_complete`, one thread at a time): no thread hop at all;
* where it already runs one (a Jupyter kernel), that loop cannot be re-entered, and where
  several threads call at once (a run reading tables in parallel), one loop cannot be
  driven from two places: the engine starts ONE helper thread that runs the client's loop
  from then on, for the rest of the client's life; calls are submitted to it and waited
  for, from any number of threads, and share its connections and limits.

Either way there is one loop per client, so its connections, its rate limiter and every
task a read leaves running (pages fetched ahead) stay on that loop. An async generator is
driven item by item (`Engine.stream`): the loop runs only while the consumer waits for the
next item, and the generator is closed (its tasks cancelled) when the consumer stops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterable, AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar, cast

from connector.errors import EngineError

__all__ = ["Engine", "EngineError"]

T = TypeVar("T")


class Engine:
    """Runs coroutines on one event loop; see the module docstring."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()  # one thread drives the loop inline at a time
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Calls other threads wait for on the helper thread (`cancel` ends them).
        self._waiting: set[concurrent.futures.Future[Any]] = set()
        self._cancelled = False

    def __repr__(self) -> str:
        mode = "closed" if self._closed else "helper thread" if self._thread else "inline"
        return f"Engine({mode})"

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the engine's loop and returns its result (or raises its error)."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._closed or running is self._loop:
            coro.close()
            raise EngineError(
                "the client is closed" if self._closed else
                "a blocking Client method was called from a coroutine running on that client's "
                "loop; await the async core (`Client.aio`) there instead"
            )
        if running is None and self._lock.acquire(blocking=False):
            try:
                if self._thread is None:
                    return self._run_here(coro)
            finally:
                self._lock.release()
        # A running loop here (Jupyter), or another thread drives ours inline right now
        # (tables read in parallel): from now on the loop runs on its own thread.
        self._start_thread()
        if self._cancelled:
            coro.close()
            raise EngineError("the client's calls were cancelled: the run is stopping")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._waiting.add(future)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: the task is cancelled too
            raise
        finally:
            self._waiting.discard(future)

    def stream(self, items: AsyncIterable[T]) -> Iterator[T]:
        """Iterates an async iterable from blocking code, item by item, on the engine's loop.

        The loop runs only while the next item is awaited. When the consumer stops early
        (break, an error, the iterator dropped), the async generator is closed on the loop.
        """
        iterator = aiter(items)
        try:
            while True:
                item = self.run(_next(iterator))
                if item is _END:
                    return
                yield item
        finally:
            self._close_iterator(iterator)

    def cancel(self) -> None:
        """Cancels every call other threads wait for on the helper thread, and refuses new
        ones from then on (`EngineError`): a run stopped by Ctrl-C ends its parallel
        tables at once instead of after their current page. Closing still works."""
        self._cancelled = True
        for future in list(self._waiting):
            future.cancel()

    def close(self, last: Coroutine[Any, Any, None] | None = None) -> None:
        """Runs `last` (the core's `aclose()`), then stops the helper thread and the loop."""
        if self._closed:
            if last is not None:
                last.close()
            return
        self._cancelled = False
        try:
            if last is not None:
                self.run(last)
            self.run(self._loop.shutdown_asyncgens())
            self.run(_finish_tasks())
        finally:
            self._closed = True
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
            if not self._loop.is_running():
                self._loop.close()

    def _run_here(self, coro: Coroutine[Any, Any, T]) -> T:
        task = self._loop.create_task(coro)
        try:
            return self._loop.run_until_complete(task)
        except BaseException:
            # Interrupted (Ctrl-C) while the task still runs: cancel it and let it clean up,
            # so no half-done operation resumes the next time the loop runs.
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    self._loop.run_until_complete(task)
            raise

    def _start_thread(self) -> None:
        with self._lock:  # waits for an inline run to finish: the loop runs in one place
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="connector-engine", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _close_iterator(self, iterator: AsyncIterator[Any]) -> None:
        aclose = getattr(iterator, "aclose", None)
        if aclose is None or self._closed or self._cancelled:
            return  # cancelled: `close` finalises it with the loop's other async generators
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:  # dropped inside a coroutine of ours: close it soon
            self._loop.create_task(aclose())
        else:
            self.run(aclose())


async def _finish_tasks(rounds: int = 5) -> None:
    """Cancels every task still on the loop and waits for them: a generator a stopped read
    dropped is finalised by a task the loop schedules for it (its ``aclose``), which must end
    before the loop closes (else: "Task was destroyed but it is pending!")."""
    me = asyncio.current_task()
    for _ in range(rounds):  # finishing one task may schedule the aclose of another
        pending = [t for t in asyncio.all_tasks() if t is not me]
        if not pending:
            return
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


#: What `_next` returns at the end of the iteration.
_END: Any = object()


async def _next(iterator: AsyncIterator[T]) -> T:
    """The next item, or `_END` (a StopAsyncIteration cannot be a task's result)."""
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return cast(T, _END)
