/* ucx_attacker: a hostile KV-transfer peer, for tests/python/test_security.py.
 *
 * It holds what a peer that got past the side channel holds (a prefill
 * worker's UCX worker address and one claim's token) and tries, over UCX, to
 *   get   read 64 bytes at an address of the owner's process (RMA get),
 *   put   write 64 bytes there (RMA put),
 *   fetch ask the owner for byte ranges of its KV region (its own protocol:
 *         kv_transfer/messages.h), with the token given.
 * Each attempt prints one line: "get timeout", "put timeout" (the owner never
 * answered: it has no RMA handlers), "fetch data N" (N bytes came back),
 * "fetch refused <reason>", or "fetch timeout".
 *
 *   ucx_attacker WORKER_ADDRESS_HEX TOKEN_HEX get ADDR | put ADDR | fetch OFFSET BYTES...
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

enum { kFetchAm = 1, kDataAm = 2 };

struct data_header {
  uint64_t fetch_id;
  uint32_t range;
  uint32_t status;
};

static int done_flag;
static size_t got_bytes;
static char refusal[256];
static int refused;

static void on_send(void* request, ucs_status_t status, void* user) {
  (void)request;
  (void)status;
  (void)user;
}
static void on_rma(void* request, ucs_status_t status, void* user) {
  (void)request;
  (void)user;
  done_flag = status == UCS_OK ? 1 : -1;
}

static ucs_status_t on_data(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
  (void)arg;
  (void)param;
  struct data_header h;
  if (header_length != sizeof(h)) return UCS_OK;
  memcpy(&h, header, sizeof(h));
  if (h.status != 0) {
    size_t n = length < sizeof(refusal) - 1 ? length : sizeof(refusal) - 1;
    memcpy(refusal, data, n);
    refusal[n] = 0;
    refused = 1;
  } else {
    got_bytes += length;
  }
  return UCS_OK;
}

static int unhex(const char* s, unsigned char* out, size_t max) {
  size_t n = strlen(s) / 2;
  if (n > max) return -1;
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (unsigned char)v;
  }
  return (int)n;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void progress_for(ucp_worker_h w, double seconds, int (*stop)(void)) {
  double end = now_s() + seconds;
  while (now_s() < end && !stop()) ucp_worker_progress(w);
}
static int rma_done(void) { return done_flag != 0; }
static size_t want_bytes;
static int fetch_done(void) { return refused || (want_bytes > 0 && got_bytes >= want_bytes); }

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: %s WORKER_ADDRESS_HEX TOKEN_HEX get ADDR | put ADDR | fetch OFFSET BYTES...\n",
            argv[0]);
    return 2;
  }
  static unsigned char address[8192], token[64];
  int address_len = unhex(argv[1], address, sizeof(address));
  int token_len = unhex(argv[2], token, sizeof(token));
  if (address_len <= 0 || token_len < 0) return 2;

  ucp_config_t* config;
  ucp_config_read(NULL, NULL, &config);
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM; /* the attacker wants everything */
  ucp_context_h context;
  if (ucp_init(&params, config, &context) != UCS_OK) return 3;
  ucp_config_release(config);
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker;
  if (ucp_worker_create(context, &wp, &worker) != UCS_OK) return 3;
  ucp_am_handler_param_t hp;
  memset(&hp, 0, sizeof(hp));
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = kDataAm;
  hp.cb = on_data;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucp_worker_set_am_recv_handler(worker, &hp);

  ucp_ep_params_t ep_params;
  memset(&ep_params, 0, sizeof(ep_params));
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = (const ucp_address_t*)address;
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_h ep;
  if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) return 3;

  /* An rkey of the attacker's own memory: UCX's emulated RMA sends the raw
   * address with it, so any rkey would do against an owner with RMA on. */
  static char mine[4096];
  ucp_mem_map_params_t mp;
  memset(&mp, 0, sizeof(mp));
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = mine;
  mp.length = sizeof(mine);
  ucp_mem_h memh;
  void* rkey_buf;
  size_t rkey_size;
  ucp_rkey_h rkey = NULL;
  if (ucp_mem_map(context, &mp, &memh) == UCS_OK &&
      ucp_rkey_pack(context, memh, &rkey_buf, &rkey_size) == UCS_OK) {
    ucp_ep_rkey_unpack(ep, rkey_buf, &rkey);
  }

  const char* what = argv[3];
  if ((strcmp(what, "get") == 0 || strcmp(what, "put") == 0) && argc == 5 && rkey != NULL) {
    uint64_t addr = strtoull(argv[4], NULL, 0);
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send = on_rma;
    static char buf[64];
    memset(buf, 'X', sizeof(buf));
    void* r = what[0] == 'g' ? ucp_get_nbx(ep, buf, sizeof(buf), addr, rkey, &p)
                             : ucp_put_nbx(ep, buf, sizeof(buf), addr, rkey, &p);
    if (UCS_PTR_IS_ERR(r)) {
      printf("%s error %s\n", what, ucs_status_string(UCS_PTR_STATUS(r)));
    } else {
      if (r == NULL) done_flag = 1;
      /* A put may complete locally; flush to learn whether the owner took it. */
      if (what[0] == 'p') {
        done_flag = 0;
        void* f = ucp_ep_flush_nbx(ep, &p);
        if (f == NULL) done_flag = 1;
      }
      progress_for(worker, 3.0, rma_done);
      printf("%s %s\n", what, done_flag == 1 ? "completed" : done_flag < 0 ? "failed" : "timeout");
    }
  } else if (strcmp(what, "fetch") == 0 && argc >= 6 && (argc - 4) % 2 == 0) {
    uint32_t n = (uint32_t)((argc - 4) / 2);
    size_t len = 8 + (size_t)token_len + 4 + 16 * (size_t)n;
    unsigned char *msg = calloc(1, len), *at = msg;
    uint64_t id = 7;
    memcpy(at, &id, 8), at += 8;
    memcpy(at, token, (size_t)token_len), at += token_len;
    memcpy(at, &n, 4), at += 4;
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t off = strtoull(argv[4 + 2 * i], NULL, 0), bytes = strtoull(argv[5 + 2 * i], NULL, 0);
      memcpy(at, &off, 8), at += 8;
      memcpy(at, &bytes, 8), at += 8;
      want_bytes += bytes;
    }
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = on_send;
    p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    void* r = ucp_am_send_nbx(ep, kFetchAm, NULL, 0, msg, len, &p);
    if (UCS_PTR_IS_ERR(r)) {
      printf("fetch error %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
    } else {
      progress_for(worker, 5.0, fetch_done);
      if (refused) {
        printf("fetch refused %s\n", refusal);
      } else if (got_bytes > 0) {
        printf("fetch data %zu\n", got_bytes);
      } else {
        printf("fetch timeout\n");
      }
    }
    free(msg);
  } else {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  fflush(stdout);
  _exit(0); /* no orderly UCX teardown: the owner must cope with a peer that vanishes */
}
