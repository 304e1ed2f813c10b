/*
 * The version of everything machines of one cluster exchange: message
 * frames and every message type's layout, log records, the layouts read
 * and written one-sidedly (object headers, hashtable buckets, B-tree
 * nodes), allocation requests, recovery votes, leases. Machines of two
 * versions cannot share a cluster: a change to any of these can only be
 * refused as malformed by the other side, or worse, misread. So a
 * machine's ZooKeeper registration carries this number (src/coord/
 * README.md, "Wire versions") and the configuration manager admits only
 * machines of its own; every fabric's connect checks it too (src/fabric/
 * README.md), which is all static membership has. There is no rolling
 * upgrade.
 *
 * Bump it with any change to what crosses between machines. The durable
 * files of a data directory (the restart manifest, region files, logs)
 * have their own checks (src/node/README.md).
 */
#ifndef FARM_UTIL_WIRE_H
#define FARM_UTIL_WIRE_H

#define FARM_WIRE_VERSION 4u

#endif
