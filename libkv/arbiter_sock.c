// SPDX-License-Identifier: MIT
/*
 * The socket transport: the kvshared protocol of <linux/kvshare.h>.  A
 * request is the message header, the command struct and a data area with
 * the arrays the struct points to, the pointers rewritten as offsets; the
 * reply brings the struct back and the bytes the command wrote, which go
 * back to the caller's arrays.  Which fields are arrays, and how long,
 * is the one thing this side must know per command: kv_arrays[] below.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "arbiter_internal.h"

enum { KV_IN = 1, KV_OUT = 2 };

struct kv_array {
	unsigned short ptr;		/* offset of the __u64 pointer field */
	unsigned short count;		/* offset of the __u32 element count */
	unsigned short elem;		/* bytes per element */
	unsigned short dir;		/* KV_IN, KV_OUT or both */
};

struct kv_cmd_arrays {
	unsigned int cmd;
	struct kv_array a[2];
};

#define KV_ARRAY(type, p, c, e, d) \
	{ offsetof(type, p), offsetof(type, c), sizeof(e), d }

static const struct kv_cmd_arrays kv_arrays[] = {
	{ KVS_IOC_ALLOC, { KV_ARRAY(struct kvs_alloc, pages, count, __u32, KV_OUT),
			   KV_ARRAY(struct kvs_alloc, keys, count, struct kvs_key, KV_IN) } },
	{ KVS_IOC_PUBLISH, { KV_ARRAY(struct kvs_publish, entries, count,
				      struct kvs_publish_entry, KV_IN | KV_OUT) } },
	{ KVS_IOC_LOOKUP, { KV_ARRAY(struct kvs_lookup, keys, count, struct kvs_key, KV_IN),
			    KV_ARRAY(struct kvs_lookup, pages, count, __u32, KV_OUT) } },
	{ KVS_IOC_PUT, { KV_ARRAY(struct kvs_put, pages, count, __u32, KV_IN) } },
	{ KVS_IOC_POOL_LIST, { KV_ARRAY(struct kvs_pool_list, pools, count,
					struct kvs_pool_desc, KV_OUT) } },
	{ KVS_IOC_PAGES, { KV_ARRAY(struct kvs_pages, pages, count,
				    struct kvs_page_desc, KV_OUT) } },
};

/* Commands match by number whatever their size bits say. */
static const struct kv_cmd_arrays *kv_cmd_arrays(unsigned int cmd)
{
	size_t i;

	for (i = 0; i < sizeof(kv_arrays) / sizeof(kv_arrays[0]); i++)
		if (_IOC_TYPE(cmd) == _IOC_TYPE(kv_arrays[i].cmd) &&
		    _IOC_NR(cmd) == _IOC_NR(kv_arrays[i].cmd))
			return &kv_arrays[i];
	return NULL;
}

/* One array of a request: where the caller has it, where it goes. */
struct kv_span {
	const struct kv_array *a;
	uint64_t user;			/* the caller's pointer */
	size_t off;			/* its offset in the message */
	size_t len;
};

int kv_sock_open(struct kv_arbiter *arb, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct ucred peer;
	socklen_t len = sizeof(peer);

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	arb->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (arb->fd < 0)
		return -errno;
	/*
	 * Who listens is who creates the pools this handle attaches by
	 * default (kv_arbiter_default_owner()): the kernel says, not the
	 * daemon.
	 */
	if (connect(arb->fd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    getsockopt(arb->fd, SOL_SOCKET, SO_PEERCRED, &peer, &len)) {
		int err = -errno;

		close(arb->fd);
		return err;
	}
	arb->peer_uid = peer.uid;
	arb->daemon = true;
	return 0;
}

void kv_sock_close(struct kv_arbiter *arb)
{
	close(arb->fd);
}

static int kv_send_all(int sock, const char *buf, size_t len, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd >= 0) {
		struct cmsghdr *c;

		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	while (iov.iov_len) {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= n;
		msg.msg_control = NULL;		/* the fd went with the first bytes */
		msg.msg_controllen = 0;
	}
	return 0;
}

/* Read exactly @len bytes; a descriptor riding on them lands in *fd. */
static int kv_recv_all(int sock, char *buf, size_t len, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;

	while (iov.iov_len) {
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			int got;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			memcpy(&got, CMSG_DATA(c), sizeof(int));
			if (*fd >= 0)
				close(got);	/* one descriptor per reply at most */
			else
				*fd = got;
		}
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= n;
	}
	return 0;
}

static uint64_t kv_get_u64(const void *s, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)s + off, sizeof(v));
	return v;
}

static void kv_put_u64(void *s, size_t off, uint64_t v)
{
	memcpy((char *)s + off, &v, sizeof(v));
}

/* Lay the request out; returns its length, or 0 if it cannot be sent. */
static size_t kv_build(unsigned int cmd, const void *arg, size_t usize,
		       struct kv_span *spans, char **out)
{
	const struct kv_cmd_arrays *ca = kv_cmd_arrays(cmd);
	size_t len = sizeof(struct kvs_msg) + usize;
	int i;
	char *buf;

	for (i = 0; ca && i < 2 && ca->a[i].elem; i++) {
		const struct kv_array *a = &ca->a[i];
		uint32_t count;

		spans[i].a = a;
		if (a->ptr + 8u > usize || a->count + 4u > usize)
			continue;
		memcpy(&count, (const char *)arg + a->count, sizeof(count));
		spans[i].user = kv_get_u64(arg, a->ptr);
		if (!spans[i].user)
			continue;	/* NULL stays NULL: the arbiter says EFAULT */
		/*
		 * Beyond these counts the arbiter refuses the call (or, for
		 * POOL_LIST, reads no further) before it touches an array:
		 * never read past what it could use.
		 */
		if (count > KVS_MAX_BATCH) {
			if (a->elem != sizeof(struct kvs_pool_desc))
				return 0;
			count = KVS_MAX_POOLS;
		}
		spans[i].off = len;
		spans[i].len = (size_t)count * a->elem;
		len += spans[i].len;
	}
	if (len > KVS_MSG_MAX)
		return 0;
	buf = calloc(1, len);
	if (!buf)
		return 0;
	memcpy(buf + sizeof(struct kvs_msg), arg, usize);
	/*
	 * Output arrays travel too: the arbiter may write back what it read
	 * (it probes a result buffer that way), and whatever it did not
	 * write must come back as the caller had it.
	 */
	for (i = 0; i < 2; i++) {
		if (!spans[i].a || !spans[i].user)
			continue;
		memcpy(buf + spans[i].off, (void *)(uintptr_t)spans[i].user, spans[i].len);
		kv_put_u64(buf + sizeof(struct kvs_msg), spans[i].a->ptr, spans[i].off);
	}
	*out = buf;
	return len;
}

/* The bytes the command wrote go back into the caller's arrays. */
static void kv_scatter(const struct kv_span *spans, const char *data,
		       size_t out_off, size_t out_len)
{
	int i;

	for (i = 0; i < 2; i++) {
		const struct kv_span *s = &spans[i];
		size_t lo, hi;

		if (!s->a || !s->user || !(s->a->dir & KV_OUT))
			continue;
		lo = s->off > out_off ? s->off : out_off;
		hi = s->off + s->len < out_off + out_len ? s->off + s->len :
							   out_off + out_len;
		if (lo < hi)
			memcpy((char *)(uintptr_t)s->user + (lo - s->off),
			       data + (lo - out_off), hi - lo);
	}
}

/* Send one request and wait for its reply, under arb->lock. */
static int kv_exchange(struct kv_arbiter *arb, char *req, size_t len, int send_fd,
		       struct kvs_msg *hdr, char **reply, int *recv_fd)
{
	struct kvs_msg *m = (struct kvs_msg *)req;

	m->magic = KVS_MSG_MAGIC;
	m->len = len;
	m->seq = ++arb->seq;
	if (kv_send_all(arb->fd, req, len, send_fd) ||
	    kv_recv_all(arb->fd, (char *)hdr, sizeof(*hdr), recv_fd))
		return -ENOTCONN;
	if (hdr->magic != KVS_MSG_MAGIC || hdr->seq != m->seq ||
	    hdr->cmd != m->cmd || hdr->len < sizeof(*hdr) || hdr->len > KVS_MSG_MAX)
		return -EPROTO;
	*reply = malloc(hdr->len - sizeof(*hdr) + 1);
	if (!*reply)
		return -ENOMEM;
	if (kv_recv_all(arb->fd, *reply, hdr->len - sizeof(*hdr), recv_fd))
		return -ENOTCONN;
	return 0;
}

int kv_sock_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	struct kv_span spans[2] = { { 0 } };
	size_t usize = _IOC_SIZE(cmd), len;
	int send_fd = -1, recv_fd = -1, ret;
	struct kvs_msg hdr;
	char *req = NULL, *reply = NULL;
	void *wire;
	int i;

	if (arb->dead)
		return -ENOTCONN;
	len = kv_build(cmd, arg, usize, spans, &req);
	if (!len)
		return -E2BIG;
	((struct kvs_msg *)req)->cmd = cmd;
	wire = req + sizeof(struct kvs_msg);
	if (_IOC_NR(cmd) == _IOC_NR(KVS_IOC_POOL_CREATE) &&
	    usize >= offsetof(struct kvs_pool_create, mem_fd) + 4) {
		struct kvs_pool_create *pc = wire;

		if (pc->mem_fd >= 0) {
			/* As the ioctl would: a bad fd is the caller's EBADF. */
			if (fcntl(pc->mem_fd, F_GETFD) < 0) {
				free(req);
				return -EBADF;
			}
			send_fd = pc->mem_fd;
			pc->mem_fd = 0;		/* the first descriptor sent */
		}
	}

	pthread_mutex_lock(&arb->lock);
	ret = kv_exchange(arb, req, len, send_fd, &hdr, &reply, &recv_fd);
	if (ret)
		arb->dead = true;	/* out of step with the daemon for good */
	pthread_mutex_unlock(&arb->lock);
	if (ret)
		goto out;

	ret = -EPROTO;
	if (hdr.len < sizeof(hdr) + usize + hdr.out_len ||
	    (hdr.out_len && (hdr.out_off < sizeof(hdr) + usize ||
			     hdr.out_off + (uint64_t)hdr.out_len > len)))
		goto out;
	/* The struct comes back whole, but pointers stay the caller's. */
	for (i = 0; i < 2; i++)
		if (spans[i].a && spans[i].a->ptr + 8u <= usize)
			kv_put_u64(reply, spans[i].a->ptr, kv_get_u64(arg, spans[i].a->ptr));
	if (send_fd >= 0)	/* the wire said 0; the caller's fd is its own */
		((struct kvs_pool_create *)reply)->mem_fd = send_fd;
	memcpy(arg, reply, usize);
	kv_scatter(spans, reply + usize, hdr.out_off, hdr.out_len);
	ret = hdr.result;
	if (_IOC_NR(cmd) == _IOC_NR(KVS_IOC_POOL_ATTACH) && !ret &&
	    usize >= offsetof(struct kvs_pool_attach, mem_fd) + 4) {
		struct kvs_pool_attach *at = arg;

		at->mem_fd = recv_fd;
		recv_fd = -1;
		/* The daemon attached, but its fd could not be received here. */
		if ((at->flags & KVS_ATTACH_MEM_FD) && at->mem_fd < 0)
			ret = -EMFILE;
	}
out:
	if (recv_fd >= 0)
		close(recv_fd);
	free(reply);
	free(req);
	return ret;
}
