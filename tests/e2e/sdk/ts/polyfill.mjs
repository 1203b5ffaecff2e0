// @resonatehq/sdk 0.11.5 asks for Node 22 and calls Promise.withResolvers (Node >= 22; absent in
// Node 20). Preloaded with `node --import ./polyfill.mjs`, this adds it where it is missing, so the
// unchanged SDK runs on Node 20 too. On Node 22 it does nothing.
if (typeof Promise.withResolvers !== "function") {
  Promise.withResolvers = function withResolvers() {
    let resolve;
    let reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
