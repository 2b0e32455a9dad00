/** Packs the SDK into `work` and installs the tarball alone into `work/app`, offline. */
export function installPackedSdk(
  work: string,
  env: NodeJS.ProcessEnv,
): Promise<{ tarball: string; app: string }>;
