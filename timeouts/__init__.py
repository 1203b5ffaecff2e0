"""Time: which timeouts are due (due.py), the sweep that fires them in order (sweep.py), and the background
sweeper that runs it as they come due (sweeper.py, and its Celery task in tasks.py).

The four timeout transitions of 02-timeouts.lean live with what they change: on_promise_timeout in
promises/engine.py, on_task_retry_timeout and on_task_lease_timeout in tasks/engine.py, on_schedule_timeout
in schedules/engine.py.
"""
