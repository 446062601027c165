"""Every state transition of a workflow, for the background runner and for the operator's recovery alike.

Functions other layers (recovery, api, console) call; each runs inside the caller's transaction with
the rows it changes already locked in the order of ``history.locking`` unless it says otherwise:

- quota: ``quota_of``, ``quota_of_task`` (locked at first use), ``permit_take``, ``permit_release``
- activation: ``task_create``, ``poll_round_start``, ``wait_create``, ``step_activate``,
  ``correlation_key_of``, ``wait_supersede``, ``activation_retry`` (the operator's re-runs),
  ``activation_superseded_state`` and ``wait_supersede_foreseen`` (what a new wait generation
  would take, for previews)
- budget: ``attempt_budget``, ``attempts_left``, ``link_max_attempts``, ``predecessor_left_exactly``, ``Budget``,
  ``task_step_budget``
- advance: ``continuation_create`` (the runner then advances), ``instance_advance``,
  ``instance_lock_graph``
- state: ``touch`` (revision bump), ``gate_sync``, ``instance_enter_review``, ``step_enter_review``,
  ``step_conclude`` (the operator's conclusion), ``instance_review_lift``, ``instance_control_touch``
- poll: ``poll_next_round``, ``poll_rounds_left``, ``poll_deadline_passed`` (the next-round rule),
  ``poll_round_await`` (the operator's confirmed PENDING)
- worker: ``task_settle_reviewed`` (the operator's verified outcome)
- definitions: ``contract_violation``, ``poll_classify``; signals: ``signal_spec_of``
- own transactions: ``stop.instance_stop_settle``, ``inbox.inbox_consume_next``,
  ``runner.runner_pass`` / ``runner_settle``, and the services of ``instances``, ``signals``
  and ``worker``.
"""
