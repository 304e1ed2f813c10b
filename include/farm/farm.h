/* libfarm: everything an application includes. */
#ifndef FARM_FARM_H
#define FARM_FARM_H

#include <farm/error.h>
#include <farm/fabric.h>
#include <farm/msg.h>
#include <farm/addr.h>
#include <farm/region.h>
#include <farm/txn.h>
#include <farm/node.h>
#include <farm/config.h>
#include <farm/kv.h>
#include <farm/btree.h>
#include <farm/stats.h>

#endif
