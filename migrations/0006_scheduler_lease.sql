-- Leadership of the scheduling loop: one lease row. The leader renews it every tick and proves it
-- (holder and epoch, row locked) inside every cycle's transaction, so a deposed leader's cycle
-- cannot commit; a standby takes it over once it has not been renewed for the lease time.
CREATE TABLE scheduler_lease (
    id         integer PRIMARY KEY CHECK (id = 1),
    holder     uuid NOT NULL,
    epoch      bigint NOT NULL,
    renewed_at timestamptz NOT NULL
);
