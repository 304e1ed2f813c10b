/*
 * Fault-injection points: named places in the library where a test can
 * make something happen (a delay that widens a race window, a SIGKILL at
 * one step of a protocol), and switch points (FARM_FAULT_SWITCH), true
 * while hooked, that turn a protection off to prove a test notices. They
 * exist only in builds configured with FARM_FAULT_INJECTION=ON (the
 * default when the tests are built, off for an installed release build:
 * -DFARM_BUILD_TESTS=OFF); elsewhere FARM_FAULT_POINT() compiles to
 * nothing, FARM_FAULT_SWITCH() to 0, and farm_fault_set() reports
 * -ENOTSUP.
 *
 * A point costs one relaxed load of its hook while no hook is set.
 * Hooks run on the thread that reaches the point, with whatever that
 * thread holds; they must not call back into the layer they sit in.
 */
#ifndef FARM_UTIL_FAULT_H
#define FARM_UTIL_FAULT_H

#include <stdatomic.h>
#include <stddef.h>

enum farm_fault_point {
	/* txn/epoch.c: a quiesce pass between reading the epoch (and
	 * checking the old bucket) and announcing its quiescent state. */
	FARM_FP_EPOCH_QUIESCE_WINDOW,
	/* node/ctl.c: a stats answer, about to call a source's counters
	 * (with the control socket's lock held). */
	FARM_FP_CTL_SOURCE,
	/* txn/commit.c, the coordinator of a distributed commit (crash
	 * points of tests/test_rec_crash.c): */
	FARM_FP_TX_LOCK_SENT,     /* every LOCK record written, no reply in */
	FARM_FP_TX_LOCK_REPLIED,  /* a LOCK reply in, another still due */
	FARM_FP_TX_BACKUP_SOME,   /* a COMMIT-BACKUP written, another not */
	FARM_FP_TX_PRIMARY_FIRST, /* the first COMMIT-PRIMARY to another
	                             machine written, the rest not */
	/* txn/participant.c, a record of another machine's coordinator: */
	FARM_FP_TX_ON_LOCK,    /* primary: its objects locked, not answered */
	FARM_FP_TX_ON_PRIMARY, /* primary: COMMIT-PRIMARY landed, unprocessed */
	FARM_FP_TX_ON_BACKUP,  /* backup: COMMIT-BACKUP landed and checked */
	/* node/node.c, a switch (FARM_FAULT_SWITCH): while hooked, a view
	 * that drops machines does not fence them (a deliberately broken
	 * protocol, tests/test_rec_zombie.c --broken). */
	FARM_FP_NODE_NO_FENCE,
	/* addrspace/ring.c, a switch: while hooked, placement ignores
	 * failure domains (a deliberately broken placement,
	 * tests/test_ring.c --broken). */
	FARM_FP_RING_NO_DOMAINS,
	/* addrspace/ring.c, a switch: while hooked, placement ignores which
	 * machines joined late (a machine with empty memory is placed as
	 * any other: tests/test_datarec.c --broken-late). */
	FARM_FP_RING_NO_LATE,
	/* txn/copy.c, a switch: while hooked, an extra backup's copy counts
	 * as complete as soon as it is opened, before anything is copied (a
	 * deliberately broken growth: tests/test_datarec.c --broken-grow
	 * must find its bytes differ). */
	FARM_FP_DATAREC_EXTRA_EARLY,
	/* addrspace/as_view.c, a switch: while hooked, a view that makes
	 * another machine primary of a region this one is primary of does
	 * not demote our copy (two primaries: tests/test_datarec.c
	 * --broken-handoff must find the copies differ). */
	FARM_FP_AS_NO_DEMOTE,
	/* as_view.c, a switch: while hooked, no demoted copy is a source
	 * for data recovery (farm_as_demoted_source answers NULL): the old
	 * primary refills from the grower alone, and is left with a filling
	 * copy when the grower dies first (tests/test_datarec.c
	 * --broken-grow-kill must find a region not replicated again). */
	FARM_FP_AS_NO_DEMOTED_SOURCE,
	/* as_view.c, a switch: while hooked, a view that no longer places
	 * this machine as a replica of a region keeps its filling copy there
	 * (held, never filled again, its bytes stale), as before the fix:
	 * a later view that makes it a backup again restarts the copy over
	 * those bytes (tests/test_addrspace.c's displaced filling copy, and
	 * test_datarec --broken-displaced, must see it still held). */
	FARM_FP_AS_KEEP_FILLING,
	/* as_view.c, a switch: while hooked, a view that demotes our
	 * primary copy of a region we stay a replica of does not open the
	 * new backup copy with it (data recovery opens it later, as before
	 * the fix): COMMIT-BACKUPs truncated in between find no copy, and
	 * the demoted copy the new one is filled from never had them
	 * (tests/test_addrspace.c --broken-demoted must find no copy held
	 * right after the view). */
	FARM_FP_AS_DEMOTED_OPEN_LATE,
	/* txn/restart.c, a switch: while hooked, a whole-cluster restart
	 * decides the logs' transactions but applies none of their images
	 * (tests/test_restart.c --broken: acknowledged transfers must be
	 * found missing). */
	FARM_FP_RESTART_NO_REPLAY,
	/* node/restart.c, a switch: while hooked, the directory check at
	 * restart passes a damaged directory (tests/test_restart.c
	 * --broken-check: the refusal must be missed). */
	FARM_FP_RESTART_NO_CHECK,
	/* node/node.c, a switch: while hooked, a machine that refuses its
	 * damaged directory leaves no refusal notice, so a whole-cluster
	 * restart waits for it as for a missing one (tests/test_restart.c
	 * --broken-notice: the others must not restart without it in time).
	 */
	FARM_FP_RESTART_NO_NOTICE,
	/* txn/restart.c, a switch: while hooked, a restart without a lost
	 * machine still asks for its COMMIT-BACKUP records (as if its log
	 * had come back), so a commit whose only proof was in that log is
	 * aborted (tests/test_restart.c --broken-lost: the caught commit
	 * must be found missing). */
	FARM_FP_RESTART_LOST_STRICT,
	/* kv/kv.c, a switch: while hooked, joining ignores the shard list a
	 * previous incarnation kept and makes new, empty shards
	 * (tests/test_restart.c --broken-kv: the keys put before a restart
	 * must be found missing). */
	FARM_FP_KV_NO_KEPT,
	/* txn/recover.c, a switch: while hooked, the decider judges a
	 * removed coordinator's transaction by the backups of the view
	 * before the current one, not of the configuration its
	 * COMMIT-BACKUPs were sent in (tests/campaign/
	 * --broken-prev-ring with the seed that lost commits). */
	FARM_FP_REC_PREV_RING,
	/* recovery/recovery.c, a switch: while hooked, the members that are
	 * not suspected are probed on the lease channel, not by a one-sided
	 * READ (tests/test_rec_probe.c --broken: a member whose memory the
	 * prober cannot reach must be found kept). */
	FARM_FP_REC_LEASE_PROBE,
	/* addrspace/zk.c and node/node.c, a switch: while hooked, the
	 * manager admits a machine that comes back with its directory's
	 * memory under an id that left while the cluster lived, and that
	 * machine does not refuse itself (tests/test_restart_alone.c
	 * --broken: the survivors' configuration must be seen taking it
	 * back). */
	FARM_FP_ZK_ADMIT_ALONE,
	/* node/restart.c, a switch: while hooked, a restart without a lost
	 * machine reads only the restarting members' coordinator rings of
	 * the others' previous logs (as before the fix), so each machine
	 * sees the lost coordinator's records in its own log alone
	 * (tests/test_restart.c --broken-rings: the lost machine's last
	 * acknowledged commit must be found missing). */
	FARM_FP_RESTART_VIEW_RINGS,
	/* txn/object.h, a switch: while hooked, an install left locked
	 * (obj_install_locked) keeps the old version in the header until
	 * its unlock, as before the fix: a free deferred in a promoted
	 * region and cleared by a whole-cluster restart is then torn
	 * (tests/test_restart_copy.c --broken). */
	FARM_FP_TX_INSTALL_OLD_HEADER,
	/* alloc/galloc.c, a switch: while hooked, a promoted region is
	 * expected (frees of its objects are deferred) but not adopted, so
	 * a test can commit a deferred free at will
	 * (tests/test_restart_copy.c). */
	FARM_FP_ALLOC_ADOPT_HOLD,
	/* node/node.c, a switch: while hooked, a whole-cluster restart
	 * that gave no machine up starts no data recovery, as before the
	 * fix: a copy the restart cut off never starts again
	 * (tests/test_restart_copy.c --broken-resume). */
	FARM_FP_NODE_RESTART_NO_COPY,
	/* txn/copy_note.c and copy.c: a view demoted copies here (growth)
	 * that this machine is still a replica of, and data recovery is
	 * about to open (on the primary's COPY) or fill their new copies
	 * (the view's transaction recovery started). A delay there let the
	 * view's first commits reach the old primary before data recovery
	 * opened its new copy, when it did (test_datarec --grow-gap). */
	FARM_FP_DATAREC_FILL_DEMOTED,
	/* txn/recover.c, a switch: while hooked, a region left on the
	 * promotion list by an earlier round is treated as before the fix:
	 * its backup copy takes recovered locks whoever the ring makes its
	 * primary, and a round that cannot promote it gives the copy up
	 * whether it holds recovered locks or not (tests/test_datarec.c
	 * --broken-grow-round: the old primary's complete copy is thrown
	 * away and the region lost when the grower dies). */
	FARM_FP_REC_STALE_PROMO,
	/* kv/sync.c, a switch: while hooked, a get whose blocking wrapper gave
	 * up still copies its late value into the caller's buffer, which the
	 * caller may have freed (tests/test_sync_abandon.c --broken, under
	 * FARM_SANITIZE=address: a use-after-free report). */
	FARM_FP_KV_SYNC_LATE_COPY,
	/* kv/owner_serve.c, a switch: while hooked, the owner answers a get
	 * from the first value it answered for that key, never revalidated
	 * (a stale answer after an acknowledged overwrite:
	 * tests/test_kv_multi --broken-owner, the checker must see it). */
	FARM_FP_KV_OWNER_STALE,
	/* kv/owner_serve.c and kv/mget_serve.c, a switch: while hooked, a
	 * loop that has just started a lookup for an asker detaches from the
	 * store, so the lookup is in flight at the detach and ends
	 * -ECANCELED (tests/test_kv_owner's in-flight phase). */
	FARM_FP_KV_DETACH_MID_LOOKUP,
	/* The same files, a switch: while hooked, a lookup cancelled by a
	 * detach is answered with its -ECANCELED, not with "read it
	 * yourself" (tests/test_kv_owner --broken-cancel must see a
	 * lookup fail). */
	FARM_FP_KV_CANCEL_UNMAPPED,
	/* txn/recover_int.h, a switch: while hooked, a machine id once
	 * removed stays removed to recovery, whichever holder has it now
	 * (its log fenced and voted on, its votes refused: test_campaign
	 * --reuse --broken-removed must report a failed cycle). */
	FARM_FP_REC_REMOVED_STICKY,
	/* fabric/shm_peer.c, a switch: while hooked, admitting a new holder
	 * of a reused id lifts its revocation without recording the
	 * incarnation, so every holder of the id is let in, an old one that
	 * still runs too (test_campaign --reuse --faults zombie_reuse
	 * --broken-inc must report a failed cycle). */
	FARM_FP_FABRIC_ADMIT_ANY,
	/* fabric/fabric.c, a switch: while hooked, a fabric opened says it
	 * speaks the next wire version, as a machine of another build would
	 * (tests/test_fabric_shm's connect errors: each side refuses the
	 * other, -EPROTO). */
	FARM_FP_FABRIC_WIRE_NEXT,
	/* txn/recover_decide.c, two switches: while hooked, this machine
	 * takes the REC_DECIDE (resp. REC_DONE) messages it gets as ones
	 * that arrived after a newer configuration began, and refuses them
	 * as stale: a round superseded with its decisions taken nowhere
	 * (test_campaign --hold-end --broken-handoff; its hook unhooks both
	 * at the first REC_DONE; tests/test_restart_round.c). */
	FARM_FP_REC_DECIDE_LATE,
	FARM_FP_REC_DONE_LATE,
	/* recover_decide.c, a switch: while hooked, this machine refuses as
	 * stale the REC_DONE that has it empty a removed holder's log (the
	 * one after every survivor logged and applied the decisions): a
	 * round superseded after the other survivors ended it (test_campaign
	 * --hold-end; its hook unhooks itself at the first). */
	FARM_FP_REC_EMPTY_LATE,
	/* txn/recover_kept.c, a switch: while hooked, a survivor keeps no
	 * decision it applied, so one that emptied a removed holder's log
	 * sends nothing for it in a later round, as before the fix
	 * (test_campaign --hold-end --broken-kept: the round stalls and a
	 * cycle must fail). */
	FARM_FP_REC_NO_KEPT,
	/* txn/recover_decide.c, a switch: while hooked, a survivor applies
	 * a recovery round's decision without logging it first, and empties
	 * the removed coordinator's log as soon as it has applied them, as
	 * before the fix (tests/test_restart_round.c --broken-unlogged: a
	 * restart during the round decides with its own configuration's
	 * backups, and O's copies must differ). */
	FARM_FP_REC_DECIDE_UNLOGGED,
	/* node/restart.c, restart_run.c, a switch: while hooked, a
	 * whole-cluster restart reads only the previous members' rings, not
	 * those of removed coordinators whose records a log still holds, as
	 * before the fix (tests/test_restart_round.c --broken-unread: a
	 * backup's COMMIT-BACKUP of the round's commit is dropped, and O's
	 * copies must differ). */
	FARM_FP_RESTART_NO_PENDING,
	/* txn/txm.c, a switch: while hooked, a survivor's log of a reused
	 * id opens to the new holder as soon as it is admitted, whether or
	 * not the old holder's records there were decided (test_campaign
	 * --hold-end --broken-handoff: the comparison of copies must find
	 * cold objects differ). */
	FARM_FP_TXN_NO_HANDOFF,
	/* node/view.c, a delay point: a survivor applying the view that
	 * admits a new holder of a reused id, before its loops start their
	 * channels with the id afresh (test_campaign --slow-replace: the new
	 * holder's first request to each member must still be answered). */
	FARM_FP_NODE_REPLACE,
	/* txn/recover_decide.c, a switch: while hooked, a decision to commit
	 * that finds the transaction's LOCK no longer held here installs the
	 * LOCK record's after-images all the same (its COMMIT-PRIMARY did
	 * already): a newer commit of those objects since is overwritten
	 * (tests/test_rec_stale.c's decided_after_primary must see it). */
	FARM_FP_REC_DECIDE_REINSTALL,
	/* coord/zk.c, a delay point: a view read from ZooKeeper is
	 * published only when the hook returns (tests/test_rec_newconfig.c:
	 * survivors must take the configuration from the CM's NEW-CONFIG
	 * long before). */
	FARM_FP_ZK_SLOW_PUBLISH,
	/* node/view.c, a switch: while hooked, the CM sends no NEW-CONFIG
	 * after its compare-and-set (test_rec_newconfig --broken must then
	 * fail). */
	FARM_FP_NODE_NO_NEW_CONFIG,
	/* recovery/lease.c, a switch: while hooked, a probe waits for a
	 * machine the fabric saw die as for any other (test_lease
	 * --broken-dead must then fail). */
	FARM_FP_LEASE_PROBE_WAIT_DEAD,
	/* coord/zk_next.c, a switch: while hooked, every machine with a
	 * lower id than itself registered builds the next configuration and
	 * so reads every member's registration, as before the rule that
	 * leaves it to the manager and its successor (test_zk --broken: a
	 * third machine's reads must be seen). */
	FARM_FP_ZK_ALL_MANAGE,
	/* recovery/recovery.c, a switch: while hooked, the CM skips the lease
	 * wait whenever death notices are exact, even for a machine only
	 * suspected (a lapsed lease: paused, not dead) (test_recovery
	 * --broken: the stopped machine's removal must be seen waited
	 * for). */
	FARM_FP_REC_SUSPECT_AS_DEAD,
	/* hashtable/ht_pair.c (farm_ht_pair_get_in), a delay point: a key
	 * found in its slot where it lies, its header and key read, its
	 * value not yet (tests/test_ht_batch.c installs a new version of the
	 * bucket there). */
	FARM_FP_HT_SLOT_WINDOW,
	/* ht_pair.c, a switch: while hooked, those reads are not checked
	 * afterwards (the bucket's header unchanged, the slot's lines of its
	 * version), so a slot of two versions of its bucket is taken
	 * (test_ht_batch --broken must see a torn value). */
	FARM_FP_HT_SLOT_NO_CHECK,
	/* hashtable/ht_ship.c, a delay point: a batch of shipped writes
	 * about to start on the shard's owner, after they were accepted
	 * (tests/test_ht.c moves the shard's region away there). */
	FARM_FP_HT_BATCH_START,
	/* ht_ship.c, a switch: while hooked, a batched write whose shard
	 * this machine stopped serving since it was accepted is answered
	 * with its buckets' local reads' -EREMOTE, a hard error, as before
	 * the fix, not refused with -EAGAIN (test_ht --broken must see
	 * -EREMOTE). */
	FARM_FP_HT_APPLY_MOVED,
	/* coord/zk.c, a switch: while hooked, a new holder of a reused id
	 * waits for a removed incarnation's registration to end with its
	 * session instead of replacing it (test_zk --broken-wait must find
	 * the join slow). */
	FARM_FP_ZK_DISPLACE_WAIT,
	/* coord/zk.c, a switch: while hooked, a machine replaces any other
	 * session's registration of its id, also one the configuration does
	 * not list as removed (test_zk --broken-early must find a paused,
	 * live member displaced). */
	FARM_FP_ZK_DISPLACE_EARLY,
	/* alloc/galloc.c, a switch: while hooked, an allocation that wants
	 * a region while promoted regions are still to be adopted makes one
	 * at once instead of waiting for them (test_galloc --broken-park
	 * must see a region made). */
	FARM_FP_ALLOC_NO_PARK,
	/* alloc/galloc.c, a delay point: the adopter thread is about to
	 * rebuild a promoted region (tests/test_galloc.c holds it there
	 * while an allocation wants a region). */
	FARM_FP_ALLOC_ADOPT_SLOW,
	/* node/restart_run.c, a switch: while hooked, a whole-cluster
	 * restart decides a transaction known only by its COMMIT-BACKUPs by
	 * the backups of the configuration it restarts in, not those of the
	 * configuration its records carry, as before the fix
	 * (tests/test_restart_round.c --keep-records --broken-own-ring: an
	 * idle coordinator's last commit is aborted at the restart while
	 * its primary installed it, and O's copies must differ). */
	FARM_FP_RESTART_OWN_RING,
	/* node/leave.c, a switch: while hooked, a leaving machine skips the
	 * completion check and asks to go as soon as it is listed leaving,
	 * before its successors' copies are complete (tests/test_leave_node.c
	 * --broken must lose copies). */
	FARM_FP_LEAVE_EARLY,
	/* node/leave.c, a switch: while hooked, every step of a graceful
	 * leave says "not yet" (its view never comes), so the leave runs
	 * until its timeout or a close (tests/test_leave_close.c). */
	FARM_FP_LEAVE_HOLD,
	/* node/leave.c, a switch: while hooked, a graceful leave ignores
	 * farm_node_close's closing flag, as before the flag, and holds the
	 * close for the leave's whole timeout (tests/test_leave_close.c
	 * --broken-cancel). */
	FARM_FP_LEAVE_NO_CANCEL,
	/* node/leave.c, a switch: while hooked, a graceful leave that gives
	 * up (timeout, close, error) lets commits in again also after it
	 * said R/left in the configuration in force, as before the fix
	 * (tests/test_leave_timeout.c --broken-unquiesce must see a commit
	 * admitted after the timeout). */
	FARM_FP_LEAVE_UNQUIESCE,
	/* node/leave.c, a switch: while hooked, a farm_node_leave that
	 * starts while another runs on the machine is not refused
	 * -EALREADY but runs alongside it, as before the guard
	 * (tests/test_leave_twice.c --broken-unguarded must see a commit
	 * admitted after R/left). */
	FARM_FP_LEAVE_UNGUARDED,
	/* node/leave.c: a graceful leave quiesced with no commit of its own
	 * out, about to say R/left (tests/test_leave_twice.c holds it
	 * there while a second call is made). */
	FARM_FP_LEAVE_QUIESCED,
	/* coord/zk_next.c, a switch: while hooked, the manager ignores
	 * R/left (the view that lets a leaver go never comes) and calls the
	 * hook each time the mark would have let one go
	 * (tests/test_leave_timeout.c). */
	FARM_FP_ZK_LEFT_HOLD,
	/* Crash points of growth's handoff (tests/test_datarec.c
	 * --grow-crash): the grower kills itself at one step of it.
	 * txn/copy.c: a step of a copy into this machine applied, more to
	 * come (the grower's extra copies still filling). */
	FARM_FP_DATAREC_STEP,
	/* coord/zk_register.c, a switch: while hooked, a registration's
	 * card names the next wire version (a machine of another build:
	 * tests/test_zk.c test_zk_wire). */
	FARM_FP_ZK_CARD_WIRE,
	/* coord/zk_next.c, a switch: while hooked, the manager admits a
	 * machine of any wire version (test_zk --broken-wire must find
	 * the other build's machine admitted). */
	FARM_FP_ZK_ANY_WIRE,
	/* coord/zk.c: a mark (R/grow: every copy of the share complete)
	 * written to ZooKeeper, before the configuration it asks for. */
	FARM_FP_ZK_MARK_WRITTEN,
	/* txn/recover.c: this machine's round promoted its copies of some
	 * regions, their allocators not yet adopted and the round not over
	 * (the grower's first round as a member). */
	FARM_FP_REC_PROMOTED,
	/* txn/recover.c, a switch: while hooked, a recovery round sends no
	 * TRUNCATE records, so an idle coordinator's finished commits stay
	 * in the logs through later configurations, as before
	 * (tests/test_restart_round.c --keep-records: the restart must
	 * judge them by the configuration history). */
	FARM_FP_TXN_KEEP_RECORDS,
	/* alloc/walk.c, a switch: while hooked, the walk of a region calls
	 * back once per slab slot, so the elements of an array in one slot
	 * after the first are never seen, as before the fix (tests/
	 * test_restart.c --broken-stale: a whole-cluster restart leaves
	 * their stale locks). */
	FARM_FP_ALLOC_WALK_SLOTS,
	/* alloc/block.c, a switch: while hooked, a rebuild by the region's
	 * file (farm_blockalloc_rebuild_region_fd) takes every FREE block
	 * for zero without looking, where it skips only the file's holes, so
	 * a FREE block holding data the table does not describe is handed
	 * out (tests/test_alloc.c --broken-holes). */
	FARM_FP_ALLOC_HOLES_SKIP,
	/* txn/copy.c, a switch: while hooked, data recovery copies a slab
	 * slot's first object only, so the elements of an array in one slot
	 * after the first never reach a new backup unless written again, as
	 * before the fix. */
	FARM_FP_DATAREC_SLOT_FIRST,
	/* hashtable/ht_ship.c, a switch: while hooked, the owner refuses a
	 * shipped put or delete with -EAGAIN, as it does one for a shard it
	 * does not serve (a shard moving: tests/test_sync_retry.c). */
	FARM_FP_HT_REFUSE_OP,
	/* kv/sync.c, a switch: while hooked, a blocking get, put or delete
	 * returns a refusal (-EAGAIN) instead of retrying it, as before the
	 * wrappers retried (test_sync_retry --broken, --broken-get). */
	FARM_FP_KV_SYNC_NO_RETRY,
	/* node/restart_run.c, a delay point: a whole-cluster restart's
	 * copies adopted and its logs applied, the allocator about to
	 * rebuild (tests/test_restart.c --slow keeps the CPU busy there, as
	 * the walks of gigabytes do). */
	FARM_FP_RESTART_SLOW,
	/* node/view.c, a switch: while hooked, the restart runs at the
	 * real-time priority of the thread that applies views, as before
	 * the fix (tests/test_restart.c --broken-slow: a member's lease
	 * must lapse). */
	FARM_FP_RESTART_REALTIME,
	/* node/view.c, a switch: while hooked, leases are judged while a
	 * whole-cluster restart runs, as before the fix. */
	FARM_FP_RESTART_LEASES_JUDGED,
	/* alloc/galloc_adopt.c, a switch: while hooked, a committed free in
	 * a promoted region not yet adopted is kept whole until the
	 * adoption (its header left allocated), as while the adopter scans
	 * the region (test_restart_copy --scan); with
	 * FARM_FP_ALLOC_NO_FREE_MARK too, as before both fixes: a kill
	 * before the adoption leaks its slot (--broken-leak). */
	FARM_FP_ALLOC_DEFER_WHOLE,
	/* txn/restart.c, a switch: while hooked, a whole-cluster restart
	 * replays a committed free's images but leaves its slot allocated
	 * where the install was cut short, as before the fix
	 * (test_restart_round --broken-free). */
	FARM_FP_RESTART_KEEP_FREED,
	/* alloc/galloc_adopt.c, a switch: while hooked, a free deferred
	 * while the adopter scans its region (or kept whole by
	 * FARM_FP_ALLOC_DEFER_WHOLE) leaves no mark in the object's version
	 * word (FARM_OBJHDR_FREE_PENDING), as before the fix: a
	 * whole-cluster restart before the adopter frees it, its records
	 * truncated, leaks its slot (test_restart_copy --broken-leak). */
	FARM_FP_ALLOC_NO_FREE_MARK,
	/* kv/owner_serve.c, a switch: while hooked, the owner refuses an
	 * owner-served get with -EAGAIN, as it does one for a shard it is not
	 * (yet, or any more) the primary of (tests/test_sync_retry.c). */
	FARM_FP_KV_OWNER_REFUSE_GET,
	/* txn/tx.c, a switch: while hooked, a transaction's allocation finds
	 * its object's region gone from this machine (growth made another
	 * machine its primary between the allocator's answer and the
	 * transaction taking it): -EAGAIN (tests/test_txn.c alloc_moved). */
	FARM_FP_TX_ALLOC_MOVED,
	/* txn/tx.c, a switch: while hooked, that -EAGAIN leaves the object's
	 * entry in the transaction, a bug (test_txn --broken-moved: the
	 * commit must fail). */
	FARM_FP_TX_ALLOC_MOVED_KEPT,
	/* txn/copy_digest.c, a switch: while hooked, a chunk's summary takes
	 * a slab slot's first object only, so a write to a later element of
	 * a small array changes no summary (tests/test_copy_digest.c
	 * --broken). */
	FARM_FP_DIGEST_SLOT_FIRST,
	/* txn/copy_summary.c, a switch: while hooked, data recovery's check
	 * pass takes every chunk as equal to the primary's and READs none,
	 * so a copy that missed commits is never repaired (test_datarec
	 * --check-repair --broken). */
	FARM_FP_DATAREC_DIGEST_EQUAL,
	/* txn/copy_summary.c, a switch: while hooked, a copy's first pass
	 * takes every chunk from the region's stale source whatever the
	 * summaries say, so objects changed since the source was a replica
	 * stay stale (test_datarec --stale --broken). */
	FARM_FP_DATAREC_STALE_EQUAL,
	/* hashtable/ht.c, a switch: while hooked, farm_ht_detach frees the
	 * loop's lookup state at once, lookups still in flight or not (the
	 * code before they were counted; tests/test_ht_detach.c
	 * --broken-detach must see them run on freed memory). */
	FARM_FP_HT_DETACH_NOW,
	/* alloc/slab.c, a crash point of a deferred free's end
	 * (farm_slab_free_unlock, the adopter's): the object's header freed,
	 * its version word still locked and marked FARM_OBJHDR_FREE_PENDING,
	 * the slot not yet reusable (with FARM_FP_ALLOC_MARK_FIRST: the mark
	 * already off, the header still allocated). tests/test_restart_copy.c
	 * --scan-kill parks the adopter here and cuts the power. */
	FARM_FP_ALLOC_FREED_MARKED,
	/* alloc/galloc_adopt.c, a switch: while hooked, the adopter clears a
	 * deferred free's mark before it frees the header (the order before
	 * farm_slab_free_unlock): a kill between the two leaks the slot
	 * (tests/test_restart_copy.c --broken-order). */
	FARM_FP_ALLOC_MARK_FIRST,
	/* txn/object.h, a switch: while hooked, a transaction's new object
	 * is not marked (shared-locked) until its commit or abort, so data
	 * recovery copies an uncommitted allocation, which an abort then
	 * frees at the same version (tests/test_copy_digest.c
	 * --broken-new). Hook it before any transaction allocates. */
	FARM_FP_TX_NEW_UNMARKED,
	/* txn/tx.c: a transaction's allocation answered (the slot claimed),
	 * before the transaction takes the object; the hook runs on the
	 * loop and farm_tx_testing_claimed() names the object
	 * (tests/test_txn.c test_new_claimed reads it there as data
	 * recovery would). */
	FARM_FP_TX_ALLOC_CLAIMED,
	/* txn/object.h, a switch: while hooked, a transaction's allocation
	 * is claimed unmarked and the transaction marks the object once the
	 * allocator has answered (obj_mark_new), the order before: a READ
	 * or chunk summary between the two sees it allocated and unlocked
	 * (tests/test_txn.c --broken-claim). Hook it before any transaction
	 * allocates. */
	FARM_FP_TX_CLAIM_LATE,
	/* txn/commit.c: a single-machine commit's LOCK failed and its locks
	 * are undone, before the abort frees the transaction's new objects
	 * (tests/test_txn.c test_new_lock_undone reads a new object's
	 * header there: still marked). */
	FARM_FP_TX_LOCK_UNDONE,
	/* hashtable/ht_ship.c, a switch: while hooked, farm_ht_detach leaves
	 * the loop's writes as before: those queued behind a batch in
	 * flight are neither answered nor dropped, and the batch, retried
	 * or followed by them, runs on after the detach
	 * (tests/test_ht_detach.c --broken-detach-writes must see a write
	 * queued at the detach committed instead of cancelled). */
	FARM_FP_HT_DETACH_WRITES_RUN_ON,
	/* coord/balance.c, a switch: while hooked, the manager chooses no
	 * placement (pins only lose the departed machines'), so growth
	 * spreads the balanced regions as the rings do (tests/test_balance.c
	 * and tests/test_kv_grow.c --broken must see a machine more than
	 * 20% off even). */
	FARM_FP_BALANCE_OFF,
	/* kv/mget.c, a switch: while hooked, a multi-get key the first read
	 * leaves unresolved (READ lookups) is answered absent instead of
	 * looked up whole (tests/test_kv_mget.c --broken-chase must see a
	 * key of an overflow chain answered -ENOENT). */
	FARM_FP_KV_MGET_NO_CHASE,
	/* txn/copy.c, a switch: while hooked, every block table data
	 * recovery reads is taken as bad (FARM_ECORRUPT, as
	 * farm_alloc_block_layout answers a damaged one): a source whose
	 * table stays unreadable for good (tests/test_datarec_retry.c). */
	FARM_FP_DATAREC_BAD_TABLE,
	/* txn/copy_retry.c, a switch: while hooked, a bad block table is
	 * read again at once and logged each time, forever, as before the
	 * bound (test_datarec_retry --broken must see the copy spin). */
	FARM_FP_DATAREC_BAD_UNBOUNDED,
	/* txn/copy.c, a switch: while hooked, every block table read from
	 * this machine's demoted copy (growth) is taken as bad: a demoted
	 * source whose table stays unreadable for good
	 * (tests/test_datarec_demoted.c). */
	FARM_FP_DATAREC_BAD_LOCAL_TABLE,
	/* txn/copy_retry.c, a switch: while hooked, this machine's demoted
	 * copy is never given up for the primary: a table that stayed bad
	 * past the bound stalls as the primary's would, an object locked
	 * there is read again for good (test_datarec_demoted --broken must
	 * see the copy never complete). */
	FARM_FP_DATAREC_NO_LOCAL_FALLBACK,
	/* txn/copy.c, a switch: while hooked, an object that stays locked
	 * or torn at the source is read again at every tick of the pace,
	 * with no backoff, as before the bound (test_datarec_stuck
	 * --broken must see the re-reads unpaced). */
	FARM_FP_DATAREC_STUCK_UNPACED,
	/* txn/restart.c, a switch: while hooked, the check of a log file at
	 * rest by its descriptor (farm_txlog_check_fd) takes every ring for
	 * a hole and reads none, where it skips only rings without data
	 * (tests/test_txn.c --broken-rings must see a damaged record after
	 * a hole accepted). */
	FARM_FP_TXLOG_SKIP_DATA,
	/* recovery/lease.c, a switch: while hooked, the CM's serve word
	 * only ever grows from its join grace, as before the first grant
	 * ended that grace (test_rec_cascade cm --broken: the CM, stopped
	 * and removed within a second of its configuration, must serve
	 * lock-free reads after SIGCONT). */
	FARM_FP_LEASE_CM_GRACE,
	/* msg/msg_rpc.c, a switch: while hooked, a call to a machine a
	 * configuration removed waits for its deadline, as before such
	 * calls ended at the next scan (test_rec_cascade early --broken: a
	 * survivor's lookup sent to the stopped CM must hold it 10 s). */
	FARM_FP_MSG_CALL_REMOVED_WAIT,
	/* recovery/recovery.c, txn/tx.c and txn/commit.c, a switch: while
	 * hooked, a machine that knows it was removed acts as before it
	 * went quiet: its lease thread renews and judges the configuration
	 * it was removed from, its suspicions are probed, its transactions
	 * begin, and every record a commit cannot write is warned
	 * (test_rec_zombie --broken-loud must see its lease traffic and log
	 * lines grow while its application retries). */
	FARM_FP_REMOVED_LOUD,
	/* txn/commit_start.c: a commit's objects placed and its
	 * configuration read, before its images are built (a view installed
	 * here must make a single-machine commit abort once recovery's
	 * configuration passes it: test_rec_stale place_window). */
	FARM_FP_TX_PLACED,
	/* txn/commit_start.c, a switch: while hooked, a commit places its
	 * objects by the current view and reads its configuration after, as
	 * before it read the configuration first and placed by that
	 * configuration's ring (test_rec_stale place_window --broken: a view
	 * installed between the two stamps the commit with the new
	 * configuration over the old one's backups, and it installs). */
	FARM_FP_TX_CFG_LATE,
	/* txn/object.h obj_check, a switch: while hooked, a later line whose
	 * version disagrees with the header's is taken as consistent, so a
	 * read that straddled an install returns a torn object
	 * (test_lf_torn --broken must see one returned). */
	FARM_FP_OBJ_NO_LINE_CHECK,
	FARM_FP_COUNT
};

typedef void (*farm_fault_fn)(enum farm_fault_point fp, void *arg);

struct farm_fault_slot {
	_Atomic(farm_fault_fn) fn;
	void *_Atomic arg;
};
extern struct farm_fault_slot farm_fault_slots[FARM_FP_COUNT];

/* Set (or with @fn NULL clear) the hook of @fp. 0; -EINVAL (no such
 * point); -ENOTSUP (built without fault injection). */
int farm_fault_set(enum farm_fault_point fp, farm_fault_fn fn, void *arg);
/* Whether this build has fault-injection points at all. */
int farm_fault_built(void);

#ifdef FARM_FAULT_INJECTION
/* A point that sees a hook sees its argument: farm_fault_set (fault.c)
 * stores the argument before the hook. */
static inline void farm_fault_hit(enum farm_fault_point fp)
{
	/* Pairs with the release store of the hook in farm_fault_set. */
	farm_fault_fn fn = atomic_load_explicit(&farm_fault_slots[fp].fn,
	                                        memory_order_acquire);
	if (__builtin_expect(fn != NULL, 0))
		fn(fp, atomic_load_explicit(&farm_fault_slots[fp].arg,
		                            memory_order_relaxed));
}
/* A switch point: true while a hook is set (which is called first). */
static inline int farm_fault_switch(enum farm_fault_point fp)
{
	/* Pairs with the release store of the hook in farm_fault_set. */
	farm_fault_fn fn = atomic_load_explicit(&farm_fault_slots[fp].fn,
	                                        memory_order_acquire);
	if (__builtin_expect(fn == NULL, 1))
		return 0;
	fn(fp, atomic_load_explicit(&farm_fault_slots[fp].arg,
	                            memory_order_relaxed));
	return 1;
}
#define FARM_FAULT_POINT(fp)  farm_fault_hit(fp)
#define FARM_FAULT_SWITCH(fp) farm_fault_switch(fp)
#else
#define FARM_FAULT_POINT(fp)  ((void)0)
#define FARM_FAULT_SWITCH(fp) 0
#endif

#endif
